/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small compiler helpers shared by every folder: container_of, branch hints, visibility of the
 * few symbols a shared object exports.
 */
#ifndef MK_COMPILER_H
#define MK_COMPILER_H

#include <stddef.h>

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#define mk_likely(x)   __builtin_expect(!!(x), 1)
#define mk_unlikely(x) __builtin_expect(!!(x), 0)

/* Everything is hidden by default (-fvisibility=hidden); this marks the exported tables. */
#define MK_EXPORT __attribute__((visibility("default")))

#define MK_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MK_ALIGN_UP(x, a)   (((x) + ((a)-1)) & ~((__typeof__(x))(a)-1))
#define MK_ALIGN_DOWN(x, a) ((x) & ~((__typeof__(x))(a)-1))

#endif /* MK_COMPILER_H */
