/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How the runtime serves the ops above it without naming any (comm_ops.c). An op of fused/ops/
 * declares itself once, next to its code:
 *
 *	MK_COMM_OP(alltoall, .comm_init = a2a_comm_init, .state_free = a2a_state_free);
 *
 * mkCommInit runs every linked op's comm_init last (e.g. to load a kernel that must not load
 * lazily while another kernel waits for it), and an op keeps its per-comm state in the comm's
 * slots (mk_comm_op_get / mk_comm_op_put), which mk_comm_free hands back to its state_free.
 * Records are gathered in the "mk_comm_ops" linker section, as parameters are (mk/param.h), so
 * an op linked into the binary is found without a central list. Declare the record in a C file
 * (designated initializers), next to the state it frees.
 */
#ifndef MK_FUSED_RUNTIME_COMM_OPS_H
#define MK_FUSED_RUNTIME_COMM_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

struct mk_comm;

struct mk_comm_op {
	const char *name; /* for messages */
	/* Optional: called by mkCommInit once the comm works; 0 or -errno (mkCommInit fails). */
	int (*comm_init)(struct mk_comm *c);
	/* Optional: releases what the op put in the comm's slot (called by mk_comm_free). */
	void (*state_free)(struct mk_comm *c, void *state);
};

/* Ops with state on one comm at a time (a slot each). */
#define MK_COMM_OP_SLOTS 8

struct mk_comm_op_slots {
	const struct mk_comm_op *op[MK_COMM_OP_SLOTS];
	void *state[MK_COMM_OP_SLOTS];
};

#define MK_COMM_OP(id_, ...)                                                                       \
	const struct mk_comm_op mk_comm_op_##id_ = { .name = #id_, __VA_ARGS__ };                  \
	static const struct mk_comm_op *const mk_comm_op_ptr_##id_                                 \
		__attribute__((used, section("mk_comm_ops"))) = &mk_comm_op_##id_

/* Run every linked op's comm_init; stops at the first error and returns it. */
int mk_comm_ops_init(struct mk_comm *c);
/* Hand every op's state to its state_free and empty the slots. */
void mk_comm_ops_release(struct mk_comm *c, struct mk_comm_op_slots *t);

/* The op's state on this comm, or NULL before it put one. */
void *mk_comm_op_get(const struct mk_comm_op_slots *t, const struct mk_comm_op *op);
/* Keep state for op (replacing what it had). 0, or -ENOSPC when every slot is taken. */
int mk_comm_op_put(struct mk_comm_op_slots *t, const struct mk_comm_op *op, void *state);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_COMM_OPS_H */
