// SPDX-License-Identifier: Apache-2.0
/* Deterministic first-fit allocator of symmetric-heap offsets (see symm.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fused/runtime/symm.h"

int mk_symm_init(struct mk_symm *s, uint64_t cap)
{
	memset(s, 0, sizeof(*s));
	s->max = 16;
	s->b = calloc((size_t)s->max, sizeof(*s->b));
	if (s->b == NULL)
		return -ENOMEM;
	s->cap = cap;
	s->b[0] = (struct mk_symm_block){ .off = 0, .len = cap, .used = 0 };
	s->n = 1;
	return 0;
}

void mk_symm_fini(struct mk_symm *s)
{
	free(s->b);
	memset(s, 0, sizeof(*s));
}

int mk_symm_alloc(struct mk_symm *s, uint64_t len, uint64_t *off)
{
	if (len == 0 || len > s->cap)
		return -EINVAL;
	len = (len + MK_SYMM_ALIGN - 1) & ~(uint64_t)(MK_SYMM_ALIGN - 1);
	for (int i = 0; i < s->n; i++) {
		struct mk_symm_block *b = &s->b[i];

		if (b->used || b->len < len)
			continue;
		if (b->len > len) {
			if (s->n == s->max) {
				struct mk_symm_block *nb =
					realloc(s->b, 2 * (size_t)s->max * sizeof(*nb));

				if (nb == NULL)
					return -ENOMEM;
				s->b = nb;
				s->max *= 2;
				b = &s->b[i];
			}
			memmove(&s->b[i + 2], &s->b[i + 1], (size_t)(s->n - i - 1) * sizeof(*b));
			s->b[i + 1] = (struct mk_symm_block){ .off = b->off + len,
							      .len = b->len - len,
							      .used = 0 };
			s->n++;
			b->len = len;
		}
		b->used = 1;
		*off = b->off;
		return 0;
	}
	return -ENOMEM;
}

int mk_symm_free(struct mk_symm *s, uint64_t off)
{
	for (int i = 0; i < s->n; i++) {
		if (s->b[i].off != off || !s->b[i].used)
			continue;
		s->b[i].used = 0;
		if (i + 1 < s->n && !s->b[i + 1].used) {
			s->b[i].len += s->b[i + 1].len;
			memmove(&s->b[i + 1], &s->b[i + 2], (size_t)(s->n - i - 2) * sizeof(*s->b));
			s->n--;
		}
		if (i > 0 && !s->b[i - 1].used) {
			s->b[i - 1].len += s->b[i].len;
			memmove(&s->b[i], &s->b[i + 1], (size_t)(s->n - i - 1) * sizeof(*s->b));
			s->n--;
		}
		return 0;
	}
	return -EINVAL;
}

uint64_t mk_symm_size(const struct mk_symm *s, uint64_t off)
{
	for (int i = 0; i < s->n; i++) {
		if (s->b[i].off == off && s->b[i].used)
			return s->b[i].len;
	}
	return 0;
}

int mk_symm_contains(const struct mk_symm *s, uint64_t off, uint64_t len)
{
	for (int i = 0; i < s->n; i++) {
		const struct mk_symm_block *b = &s->b[i];

		if (b->used && off >= b->off && off - b->off <= b->len &&
		    len <= b->len - (off - b->off))
			return 1;
	}
	return 0;
}
