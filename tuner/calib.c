// SPDX-License-Identifier: Apache-2.0
/*
 * Calibration data (calib.h): the parser, the process-wide copy (MKERNEL_CALIBRATION or the
 * built-in H200 table) and the shape-class lookup behind mkGemm's path choice and the cost
 * model's GEMM times.
 */
#define MK_LOG_PREFIX "TUNER/mkernel"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"
#include "mk/log.h"
#include "mk/param.h"
#include "policy.h"
#include "rules.h"

MK_PARAM_STR(calibration, "tuner", "MKERNEL_CALIBRATION", "",
	     "calibration file written by mkernel-calibrate (GEMM times per shape class and path, "
	     "links, fused-op overheads); empty = the built-in H200 table");

#define CALIB_MAX_TOKENS 16
#define CALIB_MAX_LINE	 255

struct calib_line {
	char buf[CALIB_MAX_LINE + 1];
	char *tok[CALIB_MAX_TOKENS];
	int n;
};

/* Split one line into tokens; a '#' starts a comment. 0, or -EINVAL (too long, too many). */
static int calib_tokens(const char *s, size_t len, struct calib_line *l)
{
	char *p;

	if (len > CALIB_MAX_LINE)
		return -EINVAL;
	memcpy(l->buf, s, len);
	l->buf[len] = '\0';
	p = strchr(l->buf, '#');
	if (p != NULL)
		*p = '\0';
	l->n = 0;
	for (p = strtok(l->buf, " \t\r"); p != NULL; p = strtok(NULL, " \t\r")) {
		if (l->n == CALIB_MAX_TOKENS)
			return -EINVAL;
		l->tok[l->n++] = p;
	}
	return 0;
}

static int calib_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end != '\0' || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A finite number >= lo (and > 0 when positive is set). */
static int calib_num(const char *s, double lo, int positive, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || !isfinite(v) || v < lo || (positive && v <= 0))
		return -EINVAL;
	*out = v;
	return 0;
}

/* "cublas", "gemmex", "skinny" or "eBMxBNsS". */
static int calib_path(const char *s, struct mk_calib_gemm *g)
{
	unsigned int bm, bn, sp;
	char tail;

	if (strcmp(s, "cublas") == 0 || strcmp(s, "gemmex") == 0) {
		g->engine = 0;
		g->gemmex = s[1] == 'e';
		return 0;
	}
	if (strcmp(s, "skinny") == 0) {
		g->engine = MK_CALIB_SKINNY;
		g->splits = 1;
		return 0;
	}
	if (sscanf(s, "e%ux%us%u%c", &bm, &bn, &sp, &tail) != 3 || (bm != 64 && bm != 128) ||
	    (bn != 128 && bn != 256) || sp < 1 || sp > 16)
		return -EINVAL;
	g->engine = 1;
	g->bm = (uint16_t)bm;
	g->bn = (uint16_t)bn;
	g->splits = (uint8_t)sp;
	return 0;
}

static int calib_gemm_record(const struct calib_line *l, struct mk_calib_gemm *g, const char **why)
{
	uint64_t m, n, k;
	double us;

	memset(g, 0, sizeof(*g));
	if (l->n != 7) {
		*why = "gemm record: expected 'gemm M N K nk|kn PATH US'";
		return -EINVAL;
	}
	if (calib_uint(l->tok[1], 1, INT32_MAX, &m) || calib_uint(l->tok[2], 1, INT32_MAX, &n) ||
	    calib_uint(l->tok[3], 1, INT32_MAX, &k)) {
		*why = "gemm record: M, N and K must be integers in 1 .. 2^31-1";
		return -EINVAL;
	}
	if (strcmp(l->tok[4], "nk") != 0 && strcmp(l->tok[4], "kn") != 0) {
		*why = "gemm record: layout must be nk or kn";
		return -EINVAL;
	}
	if (calib_path(l->tok[5], g)) {
		*why = "gemm record: path must be cublas, gemmex, skinny or eBMxBNsS (BM 64|128, "
		       "BN "
		       "128|256, S 1..16)";
		return -EINVAL;
	}
	if (calib_num(l->tok[6], 0, 1, &us) || us > 1e9) {
		*why = "gemm record: time must be a number of microseconds > 0";
		return -EINVAL;
	}
	g->m = (uint32_t)m;
	g->n = (uint32_t)n;
	g->k = (uint32_t)k;
	g->b_nk = strcmp(l->tok[4], "nk") == 0;
	g->us = (float)us;
	return 0;
}

static int calib_link_record(const struct calib_line *l, struct mk_calib *c, const char **why)
{
	int which;
	double lat, gbps;

	which = l->n == 4 && strcmp(l->tok[1], "nvl") == 0   ? MK_CALIB_NVL
		: l->n == 4 && strcmp(l->tok[1], "net") == 0 ? MK_CALIB_NET
							     : -1;
	if (which < 0 || calib_num(l->tok[2], 0, 0, &lat) || calib_num(l->tok[3], 0, 1, &gbps)) {
		*why = "link record: expected 'link nvl|net LAT_US GBPS' (LAT_US >= 0, GBPS > 0)";
		return -EINVAL;
	}
	c->lat_us[which] = lat;
	c->gbps[which] = gbps;
	c->link_set[which] = 1;
	return 0;
}

static int calib_op(const char *name)
{
	for (int op = 0; op < MK_FUSED_OP_COUNT && op < MK_CALIB_MAX_OPS; op++) {
		if (strcmp(name, mk_rules_op_name(op)) == 0)
			return op;
	}
	return -1;
}

static int calib_fused_record(const struct calib_line *l, struct mk_calib *c, const char **why)
{
	double us;

	int op;

	if (l->n == 3 && calib_num(l->tok[2], 0, 0, &us) == 0 && (op = calib_op(l->tok[1])) >= 0) {
		c->overhead_us[op] = us;
		c->overhead_set[op] = 1;
		return 0;
	}
	*why = "fused record: expected 'fused OP OVERHEAD_US' with a known op";
	return -EINVAL;
}

static int calib_coll_record(const struct calib_line *l, struct mk_calib *c, const char **why)
{
	struct mk_calib_coll cl, *v;
	uint64_t x[3];

	*why = "coll record: expected 'coll KIND nccl|oneshot|fused NODES LOCAL BYTES US' with a "
	       "known collective, NODES, LOCAL, BYTES >= 1 and US > 0";
	if (l->n != 7)
		return -EINVAL;
	cl.kind = -1;
	for (int k = 0; k < MK_COLL_COUNT; k++) {
		if (strcmp(l->tok[1], mk_rules_coll_name(k)) == 0)
			cl.kind = k;
	}
	cl.impl = strcmp(l->tok[2], "nccl") == 0      ? MK_CALIB_NCCL
		  : strcmp(l->tok[2], "oneshot") == 0 ? MK_CALIB_ONESHOT
		  : strcmp(l->tok[2], "fused") == 0   ? MK_CALIB_FUSED
						      : -1;
	if (cl.kind < 0 || cl.impl < 0 || calib_uint(l->tok[3], 1, 65536, &x[0]) ||
	    calib_uint(l->tok[4], 1, 65536, &x[1]) || calib_uint(l->tok[5], 1, UINT64_MAX, &x[2]) ||
	    calib_num(l->tok[6], 0, 1, &cl.us))
		return -EINVAL;
	if (c->ncoll == MK_CALIB_MAX_COLLS) {
		*why = "more than 4096 coll records";
		return -EINVAL;
	}
	v = realloc(c->coll, (c->ncoll + 1) * sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	c->coll = v;
	cl.nodes = (int)x[0];
	cl.local = (int)x[1];
	cl.bytes = x[2];
	c->coll[c->ncoll++] = cl;
	return 0;
}

static int calib_split_record(const struct calib_line *l, struct mk_calib *c, const char **why)
{
	struct mk_calib_split *v, sp;
	uint64_t x[7];

	*why = "split record: expected 'split OP NODES LOCAL M SHARE INTRA SEND REDUCE' with a "
	       "known op, NODES, LOCAL, M >= 1, SHARE 8 .. 4096 and the roles' CTAs below SHARE";
	if (l->n != 9 || (sp.op = calib_op(l->tok[1])) < 0)
		return -EINVAL;
	for (int i = 0; i < 7; i++) {
		if (calib_uint(l->tok[2 + i], i < 3 ? 1 : 0, INT32_MAX, &x[i]))
			return -EINVAL;
	}
	if (x[3] < 8 || x[3] > 4096 || x[4] + x[5] + x[6] >= x[3])
		return -EINVAL;
	if (c->nsplit == MK_CALIB_MAX_SPLITS) {
		*why = "more than 1024 split records";
		return -EINVAL;
	}
	v = realloc(c->split, (c->nsplit + 1) * sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	c->split = v;
	sp.nodes = (int)x[0];
	sp.local = (int)x[1];
	sp.m = (uint32_t)x[2];
	sp.share = (int)x[3];
	for (int r = 0; r < 3; r++)
		sp.comm[r] = (int)x[4 + r];
	c->split[c->nsplit++] = sp;
	return 0;
}

static int calib_device_record(const struct calib_line *l, struct mk_calib *c, const char **why)
{
	uint64_t sms;
	size_t used = 0;

	if (l->n < 3 || calib_uint(l->tok[1], 1, 4096, &sms)) {
		*why = "device record: expected 'device SMS NAME'";
		return -EINVAL;
	}
	c->sms = (int)sms;
	c->device[0] = '\0';
	for (int i = 2; i < l->n; i++) {
		int w = snprintf(c->device + used, sizeof(c->device) - used, "%s%s",
				 i > 2 ? " " : "", l->tok[i]);

		if (w < 0 || (size_t)w >= sizeof(c->device) - used)
			break;
		used += (size_t)w;
	}
	return 0;
}

/* Order of the gemm array: layout, shape, path (so one class is one contiguous run). */
static int calib_cmp(const void *pa, const void *pb)
{
	const struct mk_calib_gemm *a = pa, *b = pb;
	const uint64_t ka[] = { a->b_nk,   a->m,  a->n,	 a->k,	   a->engine,
				a->gemmex, a->bm, a->bn, a->splits };
	const uint64_t kb[] = { b->b_nk,   b->m,  b->n,	 b->k,	   b->engine,
				b->gemmex, b->bm, b->bn, b->splits };

	for (size_t i = 0; i < sizeof(ka) / sizeof(ka[0]); i++) {
		if (ka[i] != kb[i])
			return ka[i] < kb[i] ? -1 : 1;
	}
	return 0;
}

static int calib_record(const struct calib_line *l, struct mk_calib *c, size_t *cap, int *versioned,
			const char **why)
{
	const char *kw = l->tok[0];

	if (!*versioned) {
		uint64_t v;

		if (strcmp(kw, "mkernel-calibration") != 0 || l->n != 2 ||
		    calib_uint(l->tok[1], 1, 1000, &v) || v != MK_CALIB_VERSION) {
			*why = "the first record must be 'mkernel-calibration 1'";
			return -EINVAL;
		}
		*versioned = 1;
		return 0;
	}
	if (strcmp(kw, "gemm") == 0) {
		if (c->ngemm == MK_CALIB_MAX_GEMM) {
			*why = "more than 65536 gemm records";
			return -EINVAL;
		}
		if (c->ngemm == *cap) {
			size_t ncap = *cap ? 2 * *cap : 256;
			struct mk_calib_gemm *v = realloc(c->gemm, ncap * sizeof(*v));

			if (v == NULL)
				return -ENOMEM;
			c->gemm = v;
			*cap = ncap;
		}
		return calib_gemm_record(l, &c->gemm[c->ngemm++], why);
	}
	if (strcmp(kw, "link") == 0)
		return calib_link_record(l, c, why);
	if (strcmp(kw, "fused") == 0)
		return calib_fused_record(l, c, why);
	if (strcmp(kw, "device") == 0)
		return calib_device_record(l, c, why);
	if (strcmp(kw, "split") == 0)
		return calib_split_record(l, c, why);
	if (strcmp(kw, "coll") == 0)
		return calib_coll_record(l, c, why);
	*why = "unknown record (expected gemm, link, fused, split, coll or device)";
	return -EINVAL;
}

/* Every parsed calibration's generation (never 0): a freed table's memo entries cannot match a
 * new one at the same address. */
static uint64_t calib_gen;

int mk_calib_parse(const char *text, size_t len, struct mk_calib *out, int *line, const char **why)
{
	struct calib_line l;
	size_t pos = 0, cap = 0;
	int versioned = 0, rc = 0, ln = 0;

	memset(out, 0, sizeof(*out));
	out->gen = __atomic_add_fetch(&calib_gen, 1, __ATOMIC_RELAXED);
	*line = 0;
	*why = NULL;
	if (len > MK_CALIB_MAX_BYTES) {
		*why = "larger than 4 MiB";
		return -EINVAL;
	}
	while (pos < len && rc == 0) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl != NULL ? (size_t)(nl - (text + pos)) : len - pos;

		ln++;
		if (memchr(text + pos, '\0', n) != NULL) {
			*why = "NUL byte in the text";
			rc = -EINVAL;
		} else if (calib_tokens(text + pos, n, &l)) {
			*why = "line longer than 255 bytes or more than 16 fields";
			rc = -EINVAL;
		} else if (l.n > 0) {
			rc = calib_record(&l, out, &cap, &versioned, why);
		}
		pos += n + 1;
	}
	if (rc == 0 && !versioned) {
		*why = "no 'mkernel-calibration 1' record";
		rc = -EINVAL;
	}
	if (rc == 0 && out->ngemm > 0) { /* qsort of NULL, even of 0 entries, is undefined */
		qsort(out->gemm, out->ngemm, sizeof(*out->gemm), calib_cmp);
		for (size_t i = 1; i < out->ngemm; i++) {
			if (calib_cmp(&out->gemm[i - 1], &out->gemm[i]) == 0) {
				*why = "the same shape, layout and path measured twice";
				ln = 0;
				rc = -EINVAL;
				break;
			}
		}
	}
	if (rc) {
		*line = ln;
		mk_calib_free(out);
		return rc;
	}
	return 0;
}

void mk_calib_free(struct mk_calib *c)
{
	free(c->gemm);
	free(c->split);
	free(c->coll);
	memset(c, 0, sizeof(*c));
}

/* ---- the process's calibration ---- */

static pthread_mutex_t calib_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mk_calib *calib_cur;

static int calib_builtin(struct mk_calib *c)
{
	int line;
	const char *why;
	int rc = mk_calib_parse(mk_calib_builtin, strlen(mk_calib_builtin), c, &line, &why);

	/* The build checks the built-in table (unit test); only memory can fail here. */
	if (rc)
		MK_WARN("built-in calibration table line %d: %s", line, why ? why : strerror(-rc));
	snprintf(c->source, sizeof(c->source), "built-in");
	return rc;
}

/* Read the file named by MKERNEL_CALIBRATION; 0, or -errno with a WARN that says why. */
static int calib_file(const char *path, struct mk_calib *c)
{
	FILE *f = fopen(path, "rb");
	char *text;
	size_t n;
	int line, rc;
	const char *why = NULL;

	if (f == NULL) {
		rc = -errno;
		MK_WARN("MKERNEL_CALIBRATION=%s: cannot open it (%s); using the built-in table",
			path, strerror(-rc));
		return rc;
	}
	text = malloc(MK_CALIB_MAX_BYTES + 1);
	if (text == NULL) {
		fclose(f);
		return -ENOMEM;
	}
	n = fread(text, 1, MK_CALIB_MAX_BYTES + 1, f);
	rc = ferror(f) ? -EIO : 0;
	fclose(f);
	if (rc == 0)
		rc = mk_calib_parse(text, n, c, &line, &why);
	free(text);
	if (rc) {
		MK_WARN("MKERNEL_CALIBRATION=%s%s%.0d: %s; the file is ignored, using the built-in "
			"table",
			path, line > 0 ? ":" : "", line, why != NULL ? why : strerror(-rc));
		return rc;
	}
	snprintf(c->source, sizeof(c->source), "%s", path);
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_TUNING,
		"calibration %s: %zu gemm records, device '%s' (%d SMs)", path, c->ngemm, c->device,
		c->sms);
	return 0;
}

const struct mk_calib *mk_calib_get(void)
{
	static struct mk_calib empty = { .source = "none" };
	struct mk_calib *c;

	pthread_mutex_lock(&calib_lock);
	c = calib_cur;
	if (c == NULL) {
		const char *path = mk_param_calibration();

		c = calloc(1, sizeof(*c));
		if (c != NULL && (path == NULL || path[0] == '\0' || calib_file(path, c) != 0) &&
		    calib_builtin(c) != 0) {
			free(c);
			c = NULL;
		}
		calib_cur = c;
	}
	pthread_mutex_unlock(&calib_lock);
	return c != NULL ? c : &empty;
}

void mk_calib_reload(void)
{
	pthread_mutex_lock(&calib_lock);
	if (calib_cur != NULL) {
		mk_calib_free(calib_cur);
		free(calib_cur);
		calib_cur = NULL;
	}
	pthread_mutex_unlock(&calib_lock);
}

/* ---- shape classes ---- */

static int calib_same_class(const struct mk_calib_gemm *a, const struct mk_calib_gemm *b)
{
	return a->b_nk == b->b_nk && a->m == b->m && a->n == b->n && a->k == b->k;
}

/* Index of the first record of the nearest class, or -1 (see calib.h for the rule). */
static long calib_class_scan(const struct mk_calib *c, uint64_t m, uint64_t n, uint64_t k, int b_nk)
{
	uint32_t bucket = 0, top = 0;
	int layout = b_nk ? 1 : 0, have = 0;
	long best = -1;
	double best_d = 0;

	for (size_t i = 0; i < c->ngemm; i++)
		have |= c->gemm[i].b_nk == layout;
	if (!have)
		layout = !layout; /* only the other layout was measured */
	for (size_t i = 0; i < c->ngemm; i++) {
		const uint32_t cm = c->gemm[i].m;

		if (c->gemm[i].b_nk != layout)
			continue;
		if (cm >= m && (bucket == 0 || cm < bucket))
			bucket = cm;
		top = cm > top ? cm : top;
	}
	if (bucket == 0)
		bucket = top;
	if (bucket == 0 || (double)bucket > MK_CALIB_MAX_M_RATIO * (double)m)
		return -1;
	for (size_t i = 0; i < c->ngemm; i++) {
		const struct mk_calib_gemm *g = &c->gemm[i];
		double d;

		if (g->b_nk != layout || g->m != bucket || (i > 0 && calib_same_class(g, g - 1)))
			continue;
		d = fabs(log2((double)n / g->n)) + fabs(log2((double)k / g->k));
		if (best < 0 || d < best_d - 1e-12 ||
		    (fabs(d - best_d) <= 1e-12 &&
		     ((uint64_t)g->n * g->k > (uint64_t)c->gemm[best].n * c->gemm[best].k ||
		      ((uint64_t)g->n * g->k == (uint64_t)c->gemm[best].n * c->gemm[best].k &&
		       g->n > c->gemm[best].n)))) {
			best = (long)i;
			best_d = d;
		}
	}
	return best >= 0 && best_d <= MK_CALIB_MAX_DIST ? best : -1;
}

/*
 * calib_class_scan() with a per-thread memo of recent queries. A measured table holds thousands
 * of records and the cost model asks for several classes per fused call: scanning every record
 * each time cost more host time than a decode-size GEMM takes on the GPU.
 */
#define CALIB_MEMO 16

struct calib_memo {
	uint64_t gen, m, n, k;
	int b_nk;
	long idx;
};

static __thread struct calib_memo calib_memo[CALIB_MEMO];
static __thread unsigned int calib_memo_next;

static long calib_class(const struct mk_calib *c, uint64_t m, uint64_t n, uint64_t k, int b_nk)
{
	struct calib_memo *e;

	for (int i = 0; i < CALIB_MEMO; i++) {
		e = &calib_memo[i];
		if (e->gen == c->gen && e->gen != 0 && e->m == m && e->n == n && e->k == k &&
		    e->b_nk == b_nk)
			return e->idx;
	}
	e = &calib_memo[calib_memo_next++ % CALIB_MEMO];
	*e = (struct calib_memo){ c->gen, m, n, k, b_nk, calib_class_scan(c, m, n, k, b_nk) };
	return e->idx;
}

int mk_calib_gemm_choose(const struct mk_calib *c, uint64_t m, uint64_t n, uint64_t k, int b_nk,
			 mk_calib_path_ok ok, void *arg, struct mk_calib_choice *out)
{
	const struct mk_calib_gemm *eng = NULL, *blas = NULL, *lt = NULL, *gx = NULL;
	long i = calib_class(c, m, n, k, b_nk);

	memset(out, 0, sizeof(*out));
	/*
	 * Every class is measured with 16-byte rows. Where N or K breaks that, cuBLASLt's first
	 * algorithm under fp32-only reduction ran 1.27-1.43x the time of cublasGemmEx on the H200
	 * (1001 x 1003 x 1000, 7 x 4100 x 4104), and GemmEx matched cuBLAS's own calls.
	 */
	out->unaligned = n % 8 != 0 || k % 8 != 0;
	out->gemmex = out->unaligned;
	if (i < 0)
		return -ENOENT;
	out->m = c->gemm[i].m;
	out->n = c->gemm[i].n;
	out->k = c->gemm[i].k;
	for (size_t j = (size_t)i; j < c->ngemm && calib_same_class(&c->gemm[j], &c->gemm[i]);
	     j++) {
		const struct mk_calib_gemm *g = &c->gemm[j];

		if (!g->engine && g->gemmex)
			gx = g;
		else if (!g->engine)
			lt = g;
		else if ((ok == NULL || ok(g, arg)) && (eng == NULL || g->us < eng->us))
			eng = g;
	}
	/*
	 * cuBLAS's two calls: cublasGemmEx only when it beats cuBLASLt by MK_CALIB_GEMMEX_MARGIN.
	 * GemmEx runs cuBLAS's heuristic inside every call, Lt's plan is kept, and the calibration
	 * times bursts of calls, where that host time overlaps the GPU's; a lone call pays it. On
	 * the H200, classes where the burst had GemmEx 3-5 % ahead had it 7-10 % behind Lt in lone
	 * calls (docs/benchmarks.md, section 5a).
	 */
	blas = lt;
	if (gx != NULL && (lt == NULL || gx->us < lt->us * (1.0 - MK_CALIB_GEMMEX_MARGIN)))
		blas = gx;
	out->cublas_us = blas != NULL ? blas->us : 0;
	out->gemmex = out->unaligned || (blas != NULL && blas->gemmex);
	if (eng != NULL && (blas == NULL || eng->us < blas->us * (1.0 - MK_CALIB_TIE))) {
		out->engine = eng->engine;
		out->bm = eng->bm;
		out->bn = eng->bn;
		out->splits = eng->splits;
		out->us = eng->us;
	} else {
		out->us = out->cublas_us;
	}
	return 0;
}

double mk_calib_gemm_us(const struct mk_calib *c, uint64_t m, uint64_t n, uint64_t k, int b_nk)
{
	struct mk_calib_choice ch;
	double t;

	if (mk_calib_gemm_choose(c, m, n, k, b_nk, NULL, NULL, &ch) != 0 || ch.us <= 0)
		return -1;
	t = ch.us * ((double)n * (double)k) / ((double)ch.n * (double)ch.k);
	if (m > ch.m)
		t *= (double)m / (double)ch.m;
	return t;
}

int mk_calib_split_get(const struct mk_calib *c, int op, int nodes, int local, uint64_t m, int sms,
		       int comm[3])
{
	const struct mk_calib_split *best = NULL;
	double best_d = 0;

	for (size_t i = 0; i < c->nsplit; i++) {
		const struct mk_calib_split *s = &c->split[i];
		double d;

		if (s->op != op || s->nodes != nodes || s->local != local)
			continue;
		if (c->sms > 0 && s->share < c->sms && s->share != sms)
			continue; /* measured on a shared GPU: that share only */
		d = fabs(log2((double)m / s->m));
		if (best == NULL || d < best_d) {
			best = s;
			best_d = d;
		}
	}
	if (best == NULL)
		return -ENOENT;
	for (int r = 0; r < 3; r++) {
		comm[r] = (int)(((long long)best->comm[r] * sms + best->share / 2) / best->share);
		if (best->comm[r] > 0 && comm[r] < 1)
			comm[r] = 1;
	}
	return 0;
}

double mk_calib_coll_us(const struct mk_calib *c, int kind, int impl, int nodes, int local,
			uint64_t bytes)
{
	const struct mk_calib_coll *lo = NULL, *hi = NULL, *min = NULL, *max = NULL;
	double f;

	for (size_t i = 0; i < c->ncoll; i++) {
		const struct mk_calib_coll *x = &c->coll[i];

		if (x->kind != kind || x->impl != impl || x->nodes != nodes || x->local != local)
			continue;
		if (x->bytes <= bytes && (lo == NULL || x->bytes > lo->bytes))
			lo = x;
		if (x->bytes >= bytes && (hi == NULL || x->bytes < hi->bytes))
			hi = x;
		if (min == NULL || x->bytes < min->bytes)
			min = x;
		if (max == NULL || x->bytes > max->bytes)
			max = x;
	}
	if (min == NULL)
		return -1;
	if (lo == NULL) /* below every size: the latency of the smallest */
		return min->us;
	if (hi == NULL) /* above every size: bandwidth-bound */
		return max->us * (double)bytes / (double)max->bytes;
	if (hi->bytes == lo->bytes)
		return lo->us;
	f = log2((double)bytes / lo->bytes) / log2((double)hi->bytes / lo->bytes);
	return lo->us + f * (hi->us - lo->us);
}
