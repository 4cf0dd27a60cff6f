/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The verdict of a two-peer loopback case from each peer's code (0 pass, 77 skip, anything else
 * a failure). One peer's failure is the case's failure whatever the other did: a peer that
 * skipped must not hide a peer that failed, or a broken receiver next to a sender that found no
 * device would read as "SKIP". Both passing is a pass; otherwise a skip.
 */
#ifndef MK_TEST_CASE_VERDICT_H
#define MK_TEST_CASE_VERDICT_H

#define MK_TEST_EXIT_SKIP 77

static inline int mk_test_case_verdict(int code0, int code1)
{
	if ((code0 != 0 && code0 != MK_TEST_EXIT_SKIP) ||
	    (code1 != 0 && code1 != MK_TEST_EXIT_SKIP))
		return 1;
	if (code0 == MK_TEST_EXIT_SKIP || code1 == MK_TEST_EXIT_SKIP)
		return MK_TEST_EXIT_SKIP;
	return 0;
}

#endif
