/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The grouped GEMM's tile schedule, in plain C that compiles for the host (unit tests) and the
 * device (the kernels' producers), so what the tests check is what the GPU runs.
 *
 * Problem: for expert e, rows [offsets[e], offsets[e+1]) of A times B_e into the same rows of C.
 * The offsets live in device memory and are read by the kernel itself: the host never knows the
 * counts. Tiles are numbered by tickets: expert-major (expert 0's tiles first), inside an expert
 * bands of MK_GROUPED_GROUP_M tile rows, column-major in a band (tile rows fastest), so CTAs
 * working at the same time share the expert's B panels and A rows in L2.
 *
 * Each CTA keeps a cursor (expert, its first ticket) and moves it forward only: its tickets grow
 * (static tickets r, r + count, ... or an atomic counter). A lookup reads the offsets of up to
 * MK_GROUPED_WINDOW + 1 experts at once (independent loads, one memory latency), walks them in
 * registers, and moves on by whole windows, so an empty or passed expert costs no load latency
 * of its own.
 *
 * Offsets that are not a valid partition never lead outside [0, max_rows) and never give a row
 * to two experts: expert e's rows are [lo, hi) with lo = max(clamp(offsets[e]), hi of e - 1)
 * and hi = max(lo, clamp(offsets[e + 1])), clamp to [0, max_rows]. For non-decreasing offsets
 * with offsets[E] <= max_rows this is exactly [offsets[e], offsets[e+1]).
 */
#ifndef MK_FUSED_GEMM_GROUPED_SCHED_H
#define MK_FUSED_GEMM_GROUPED_SCHED_H

#ifdef __CUDACC__
#define MK_GROUPED_HD static __host__ __device__ __forceinline__
#else
#define MK_GROUPED_HD static inline
#endif
/* Loops over a window unrolled on the device, so the window stays in registers. */
#ifdef __CUDA_ARCH__
#define MK_GROUPED_UNROLL _Pragma("unroll")
#else
#define MK_GROUPED_UNROLL
#endif

#define MK_GROUPED_WINDOW  8  /* experts whose offsets one lookup step loads together */
#define MK_GROUPED_GROUP_M 16 /* tile rows per raster band inside an expert */

/* One tile of work, as the producer hands it to the consumers. */
struct mk_grouped_tile {
	int e;	  /* expert; -1 = no more tiles for this CTA */
	int row0; /* first row of A and C */
	int rows; /* rows of the tile that belong to expert e: 1 .. bm */
	int n0;	  /* first column of C (row of an N x K B_e) */
};

/* Where a CTA's last ticket fell; start at all zeroes. */
struct mk_grouped_cursor {
	int e;	   /* expert */
	int base;  /* first ticket of expert e */
	int floor; /* end row of expert e - 1 (0 for e = 0) */
};

/* The problem as the schedule sees it. */
struct mk_grouped_shape {
	const int *offsets; /* [num_experts + 1] */
	int num_experts;
	int max_rows; /* rows of A and C */
	int tiles_n;  /* column tiles: ceil(n / bn) */
	int bm;	      /* tile rows */
	int bn;	      /* tile columns */
};

/*
 * One offsets entry. On the device a volatile asm load: the compiler would otherwise sink each
 * load of the window into the branch that first needs it, one memory latency after another.
 */
MK_GROUPED_HD int mk_grouped_load(const int *p)
{
#ifdef __CUDA_ARCH__
	int v;

	asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
#else
	return *p;
#endif
}

MK_GROUPED_HD int mk_grouped_clamp(int v, int hi)
{
	return v < 0 ? 0 : (v > hi ? hi : v);
}

MK_GROUPED_HD int mk_grouped_max(int x, int y)
{
	return x > y ? x : y;
}

/*
 * An upper bound of the tile count for any offsets (host: grid size, overflow check): the
 * experts' row ranges are disjoint inside [0, max_rows), so tile rows <= max_rows / bm + E.
 * Returns -1 when it exceeds limit.
 */
MK_GROUPED_HD long long mk_grouped_tile_bound(long long max_rows, long long num_experts,
					      long long tiles_n, long long bm, long long limit)
{
	long long rows = (max_rows + bm - 1) / bm + num_experts;

	if (tiles_n > 0 && rows > limit / tiles_n)
		return -1;
	return rows * tiles_n;
}

/*
 * Tile (tm, tn) of the `local`-th ticket inside an expert of tiles_m x tiles_n tiles: bands of
 * MK_GROUPED_GROUP_M tile rows, column-major inside a band.
 */
MK_GROUPED_HD void mk_grouped_raster(int local, int tiles_m, int tiles_n, int *tm, int *tn)
{
	const int per_band = MK_GROUPED_GROUP_M * tiles_n;
	const int band = local / per_band;
	const int first = band * MK_GROUPED_GROUP_M;
	const int rows =
		tiles_m - first < MK_GROUPED_GROUP_M ? tiles_m - first : MK_GROUPED_GROUP_M;
	const int in_band = local - band * per_band;

	*tm = first + in_band % rows;
	*tn = in_band / rows;
}

/*
 * Tile of `ticket` (>= every ticket this cursor saw before). 1 and *t filled, or 0 when the
 * ticket is past the last tile (t->e = -1).
 */
MK_GROUPED_HD int mk_grouped_find(struct mk_grouped_cursor *c, const struct mk_grouped_shape *s,
				  int ticket, struct mk_grouped_tile *t)
{
	for (;;) {
		int v[MK_GROUPED_WINDOW + 1];
		int base = c->base, floor = c->floor;

		/* Independent, unconditional loads first (indices past the end read the last
		 * entry again): one memory latency for the whole window. */
		MK_GROUPED_UNROLL
		for (int j = 0; j <= MK_GROUPED_WINDOW; j++) {
			int e = c->e + j;

			v[j] = mk_grouped_load(
				&s->offsets[e < s->num_experts ? e : s->num_experts]);
		}
		MK_GROUPED_UNROLL
		for (int j = 0; j <= MK_GROUPED_WINDOW; j++)
			v[j] = mk_grouped_clamp(v[j], s->max_rows);
		MK_GROUPED_UNROLL
		for (int j = 0; j < MK_GROUPED_WINDOW; j++) {
			const int e = c->e + j;
			const int lo = mk_grouped_max(v[j], floor);
			const int hi = mk_grouped_max(lo, v[j + 1]);
			const int tiles_m = (hi - lo + s->bm - 1) / s->bm;
			const int tiles = tiles_m * s->tiles_n;

			if (e >= s->num_experts) {
				c->e = e;
				c->base = base;
				c->floor = floor;
				t->e = -1;
				t->row0 = t->rows = t->n0 = 0;
				return 0;
			}
			if (ticket - base < tiles) {
				int tm, tn;

				mk_grouped_raster(ticket - base, tiles_m, s->tiles_n, &tm, &tn);
				c->e = e;
				c->base = base;
				c->floor = floor;
				t->e = e;
				t->row0 = lo + tm * s->bm;
				t->rows = hi - t->row0 < s->bm ? hi - t->row0 : s->bm;
				t->n0 = tn * s->bn;
				return 1;
			}
			base += tiles;
			floor = hi;
		}
		c->e += MK_GROUPED_WINDOW;
		c->base = base;
		c->floor = floor;
	}
}

#endif /* MK_FUSED_GEMM_GROUPED_SCHED_H */
