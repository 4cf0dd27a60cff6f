// SPDX-License-Identifier: Apache-2.0
/*
 * The ops' hooks on a comm (comm_ops.h): the records every linked op put in the "mk_comm_ops"
 * section (the linker provides __start_/__stop_ symbols for it), and the per-comm slots of their
 * state. Plain C, no CUDA: unit-tested on every machine.
 */
#include <errno.h>
#include <stddef.h>

#include "fused/runtime/comm_ops.h"
#include "mk/err.h"
#include "mk/log.h"

extern const struct mk_comm_op *const __start_mk_comm_ops[]
	__attribute__((weak, visibility("hidden")));
extern const struct mk_comm_op *const __stop_mk_comm_ops[]
	__attribute__((weak, visibility("hidden")));

int mk_comm_ops_init(struct mk_comm *c)
{
	for (const struct mk_comm_op *const *p = __start_mk_comm_ops;
	     p != NULL && p < __stop_mk_comm_ops; p++) {
		int rc = (*p)->comm_init != NULL ? (*p)->comm_init(c) : 0;

		if (rc) {
			MK_WARN("mkCommInit: op %s could not prepare the comm: %s", (*p)->name,
				mk_strerror(rc));
			return rc;
		}
	}
	return 0;
}

void mk_comm_ops_release(struct mk_comm *c, struct mk_comm_op_slots *t)
{
	for (int i = 0; i < MK_COMM_OP_SLOTS; i++) {
		const struct mk_comm_op *op = t->op[i];
		void *state = t->state[i];

		t->op[i] = NULL;
		t->state[i] = NULL;
		if (op != NULL && op->state_free != NULL)
			op->state_free(c, state);
	}
}

void *mk_comm_op_get(const struct mk_comm_op_slots *t, const struct mk_comm_op *op)
{
	for (int i = 0; i < MK_COMM_OP_SLOTS; i++) {
		if (t->op[i] == op)
			return t->state[i];
	}
	return NULL;
}

int mk_comm_op_put(struct mk_comm_op_slots *t, const struct mk_comm_op *op, void *state)
{
	int free_slot = -1;

	for (int i = 0; i < MK_COMM_OP_SLOTS; i++) {
		if (t->op[i] == op) {
			t->state[i] = state;
			return 0;
		}
		if (t->op[i] == NULL && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0)
		return -ENOSPC;
	t->op[free_slot] = op;
	t->state[free_slot] = state;
	return 0;
}
