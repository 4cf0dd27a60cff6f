#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/retune.py on a small synthetic sweep (and scripts/gpu/jsonl_tag.py, which tags it).

The sweep is built so that the best static split differs per M and per layout, so that the one
row best over all M is not any single M's best, and so that shapes sharing an M must be combined.
The calibration file written is read back by the tuner's own parser and policy engine
(calib-probe, built from tuner/), so a record the C side would reject or read differently fails
here. Environment: MK_SOURCE (the source tree), MK_CALIB_PROBE (the probe binary).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ.get("MK_SOURCE", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROBE = os.environ.get("MK_CALIB_PROBE", "")
RETUNE = os.path.join(SRC, "scripts", "retune.py")
TAG = os.path.join(SRC, "scripts", "gpu", "jsonl_tag.py")
MODEL = os.path.join(SRC, "tuner", "model.c")

TAGS_H = {"layout": "h", "gpus": 8, "share": 132, "emulated": False, "machine": "H200 x 8"}
TAGS_G = dict(TAGS_H, layout="g")


def splits(bench, m, nodes, local, static, policy, adaptive, **extra):
    best = min(static, key=static.get)
    rec = {"bench": bench, "m": m, "nnodes": nodes, "nlocal": local, "rounds": 10,
           "static": {str(c): t for c, t in static.items()}, "policy_static_ms": policy,
           "best_static_ms": static[best], "best_static_comm": best, "adaptive_ms": adaptive,
           "adaptive_split": [100, 16, 8, 8], "best_static_over_adaptive": static[best] / adaptive,
           "emulated": True}
    rec.update(extra)
    return rec


def ring(seq, causal, ms, env):
    return dict(TAGS_H, bench="ring_attention", nranks=8, nnodes=2, nlocal=4, B=4, H=16, D=128,
                causal=causal, seq_local=seq, seq_total=8 * seq, fused_ms=ms,
                allgather_engine_ms=2 * ms, env=env)


def moe(comm, ms, env=None):
    rec = dict(TAGS_H, bench="moe_dispatch_gemm", world=8, nodes=2, tokens_global=16384,
               tokens_per_rank=2048, experts=256, topk=8, hidden=7168, inter=2048, mk_ms=ms,
               baseline_ms=2 * ms)
    if env is not None:
        rec["env"] = env
    elif comm is not None:
        rec["env"] = {"MKERNEL_MOE_FUSED": "1",
                      "MKERNEL_TUNER_SM_SPLIT": f"compute={132 - comm} intra={comm} send=0 reduce=0"}
    return rec


def sweep_records():
    recs = []
    # GEMM + all-reduce on h (2 x 4): the best per M is 8, 16, 16; over all M 16 is best
    for m, st in ((2048, {4: 1.30, 8: 1.00, 16: 1.05, 33: 1.40}),
                  (4096, {4: 2.60, 8: 2.10, 16: 2.00, 33: 2.40}),
                  (8192, {4: 6.00, 8: 5.20, 16: 5.00, 33: 5.50})):
        recs.append(dict(splits("gemm_allreduce_splits", m, 2, 4, st, 1.1 * min(st.values()),
                                0.98 * min(st.values())), **TAGS_H))
    # ... on g (1 x 8): send unused, reduce copies the peers' results
    recs.append(dict(splits("gemm_allreduce_splits", 4096, 1, 8, {4: 1.5, 8: 1.2, 16: 1.3, 33: 1.6},
                            1.25, 1.3), **TAGS_G))
    # one rank alone: no split record
    recs.append(dict(splits("gemm_allreduce_splits", 4096, 1, 1, {4: 1.0, 8: 1.0, 16: 1.0, 33: 1.0},
                            1.0, 1.0), **dict(TAGS_G, layout="s")))
    # GEMM + reduce-scatter on h, one M
    recs.append(dict(splits("gemm_rs_splits", 4096, 2, 4, {4: 3.0, 8: 2.9, 16: 2.95, 33: 3.3},
                            3.0, 2.95, n=4096, k=256), **TAGS_H))
    # the sequence-parallel benchmark's cells on h: NCCL's collective alone and the fused
    # kernel's time beyond the GEMM; two runs of one reduce-scatter cell (medians: 2100, 2600 us),
    # an all-gather cell where fusion wins, one where the fused kernel took less than the GEMM
    # alone (no fused record), and one rank (nothing travels: no record)
    for coll, fused in ((2.0, 3.0), (2.2, 3.2)):
        recs.append(dict(TAGS_H, bench="gemm_rs", m=4096, n=4096, k=256, nranks=8, nnodes=2,
                         nlocal=4, fused_ms=fused, cublas_nccl_ms=coll + 0.6, gemm_only_ms=0.5,
                         coll_only_ms=coll))
    recs.append(dict(TAGS_H, bench="ag_gemm", m=4096, n=1024, k=4096, nranks=8, nnodes=2,
                     nlocal=4, fused_ms=3.0, cublas_nccl_ms=5.0, gemm_only_ms=1.0,
                     coll_only_ms=4.0))
    recs.append(dict(TAGS_H, bench="ag_gemm", m=8192, n=1024, k=4096, nranks=8, nnodes=2,
                     nlocal=4, fused_ms=0.9, cublas_nccl_ms=9.0, gemm_only_ms=1.0,
                     coll_only_ms=8.0))
    recs.append(dict(TAGS_H, bench="gemm_rs", m=4096, n=4096, k=256, nranks=1, nnodes=1,
                     nlocal=1, fused_ms=1.0, cublas_nccl_ms=1.0, gemm_only_ms=0.5,
                     coll_only_ms=0.1))
    # ring attention on h from outside: causal and not at one seq_local, combined (geometric
    # mean: 8 -> 6.71, 16 -> 6.45), and the runs of the policy's split and the controller
    for causal, st in ((0, {4: 10.0, 8: 9.0, 16: 8.0, 33: 9.5}), (1, {4: 6.0, 8: 5.0, 16: 5.2,
                                                                     33: 6.0})):
        for c, ms in st.items():
            recs.append(ring(1536, causal, ms, {"MKERNEL_ROLE_SPLIT": f"0,{c},{c},{c}",
                                                "MKERNEL_SM_POLICY": "static"}))
        recs.append(ring(1536, causal, 1.1 * min(st.values()), {"MKERNEL_SM_POLICY": "static"}))
        recs.append(ring(1536, causal, 1.05 * min(st.values()), {"MKERNEL_SM_POLICY": "adaptive"}))
    # a ring benchmark outside the sweep (no variables) and PyTorch's (mk_ms): both left out
    recs.append(ring(1536, 0, 0.01, {}))
    recs.append(dict(TAGS_H, bench="ring_attention", world=8, nodes=2, seq_local=1536, mk_ms=0.01))
    # MoE dispatch on h: 44 communication CTAs best
    for comm, ms in ((16, 3.0), (33, 2.2), (44, 2.0), (66, 2.6)):
        recs.append(moe(comm, ms))
    recs.append(moe(None, 2.4, env={"MKERNEL_MOE_FUSED": "1"}))
    recs.append(moe(None, 0.5, env={}))  # bench-moe's own run: left out
    # links: node-local ping-pong and one-node all-to-all
    recs += [dict(TAGS_G, bench="pingpong", bytes=8, iters=200, nranks=8, path="node-local",
                  mkernel_rtt_us=6.0, nccl_rtt_us=20.0),
             dict(TAGS_G, bench="pingpong", bytes=128, iters=200, nranks=8, path="node-local",
                  mkernel_rtt_us=6.5, nccl_rtt_us=21.0),
             dict(TAGS_H, bench="pingpong", bytes=8, iters=200, nranks=8, path="transport",
                  mkernel_rtt_us=60.0, nccl_rtt_us=90.0),
             dict(TAGS_G, bench="alltoall", bytes_per_peer=1024, nranks=8, nnodes=1, nlocal=8,
                  mkernel_ms=0.02, nccl_ms=0.03),
             dict(TAGS_G, bench="alltoall", bytes_per_peer=64 << 20, nranks=8, nnodes=1,
                  nlocal=8, mkernel_ms=2.0, nccl_ms=2.5),
             dict(TAGS_H, bench="alltoall", bytes_per_peer=64 << 20, nranks=8, nnodes=2,
                  nlocal=4, mkernel_ms=20.0, nccl_ms=25.0)]
    return recs


def run(args, **kw):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, **kw)


def probe(*args):
    r = subprocess.run([PROBE] + [str(a) for a in args], capture_output=True, text=True)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


class Retune(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(PROBE, os.X_OK):
            raise RuntimeError(f"MK_CALIB_PROBE={PROBE!r} is not the calib-probe binary")
        cls.tmp = tempfile.mkdtemp(prefix="retune-test-")
        cls.sweep = os.path.join(cls.tmp, "sweep.jsonl")
        with open(cls.sweep, "w") as f:
            for r in sweep_records():
                f.write(json.dumps(r) + "\n")
        cls.lines = os.path.join(cls.tmp, "calib-lines.txt")
        with open(cls.lines, "w") as f:
            f.write("coll allreduce nccl 2 4 8192 55.00\nfused gemm_allreduce 9.00\n"
                    "# a comment\ncoll allreduce nccl 2 4 8192 56.00\n"
                    "fused gemm_allreduce 12.50\n")
        # the shipped table, plus records the sweep measures again (to be replaced)
        cls.base = os.path.join(cls.tmp, "base.txt")
        shutil.copy(os.path.join(SRC, "tuner", "calib_h200.txt"), cls.base)
        with open(cls.base, "a") as f:
            f.write("link nvl 1.00 100.0\nsplit gemm_allreduce 2 4 4096 132 4 4 4\n"
                    "split gemm_allreduce 2 2 4096 132 5 5 5\n")
        cls.out = os.path.join(cls.tmp, "calib.txt")
        cls.model_out = os.path.join(cls.tmp, "model.c")
        cls.report = os.path.join(cls.tmp, "report.md")
        cls.r = run([RETUNE, "--base", cls.base, "--calib-lines", cls.lines, "--out", cls.out,
                     "--model", MODEL, "--model-out", cls.model_out, "--report", cls.report,
                     cls.sweep])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_runs(self):
        self.assertEqual(self.r.returncode, 0, self.r.stderr)
        self.assertIn("7 split record(s), a link record, 7 other record(s)", self.r.stdout)

    def test_parser_accepts_it(self):
        rc, out, err = probe(self.out)
        self.assertEqual(rc, 0, err)
        # splits: 7 new (GEMM + all-reduce on h at 3 M and on g, reduce-scatter, ring, MoE),
        # the base's 2 x 2 one kept, its 2 x 4 one at 4096 replaced, the shipped table's kept;
        # colls: 6 new (the lines file's, the sequence-parallel cells'), the shipped table's
        with open(os.path.join(SRC, "tuner", "calib_h200.txt")) as f:
            shipped = f.read().splitlines()
        splits_0 = sum(1 for line in shipped if line.startswith("split "))
        colls_0 = sum(1 for line in shipped if line.startswith("coll "))
        self.assertEqual(out, "ok splits %d colls %d nvl 10.00 234.9" % (8 + splits_0,
                                                                         6 + colls_0))

    def assert_records(self, recs):
        """Each of recs is a whole line of the written file; the file's text for more checks."""
        with open(self.out) as f:
            text = f.read()
        for rec in recs:
            self.assertIn(rec + "\n", text)
        return text

    def test_split_records(self):
        text = self.assert_records((
            "split gemm_allreduce 2 4 2048 132 8 8 8",
            "split gemm_allreduce 2 4 4096 132 16 16 16",
            "split gemm_allreduce 2 4 8192 132 16 16 16",
            "split gemm_allreduce 1 8 4096 132 8 0 8",
            "split gemm_reducescatter 2 4 4096 132 8 8 8",
            "split ring_attention 2 4 1536 132 16 16 16",
            "split moe_dispatch 2 4 16384 132 44 0 0",
            "split gemm_allreduce 2 2 4096 132 5 5 5"))
        self.assertNotIn("split gemm_allreduce 2 4 4096 132 4 4 4", text)
        self.assertNotIn(" 1 1 4096 ", text)  # one rank: no split
        self.assertNotIn("link nvl 1.00", text)
        self.assertIn("link nvl 10.00 234.9\n", text)
        # the last of equal keys wins; comments of the lines file are not records
        self.assertIn("coll allreduce nccl 2 4 8192 56.00\n", text)
        self.assertNotIn("55.00", text)
        self.assertIn("fused gemm_allreduce 12.50\n", text)
        self.assertEqual(text.count("mkernel-calibration 1"), 1)
        with open(self.base) as f:  # the base's GEMM rows kept, every one
            gemm = [line for line in f if line.startswith("gemm ")]
        self.assertTrue(gemm)
        for line in gemm:
            self.assertIn(line, text)
        self.assertIn("H200 x 8", text)  # where it was measured

    def test_coll_records(self):
        text = self.assert_records((
            "coll reducescatter nccl 2 4 33554432 2100.00",
            "coll reducescatter fused 2 4 33554432 2600.00",
            "coll allgather nccl 2 4 33554432 4000.00",
            "coll allgather fused 2 4 33554432 2000.00",
            "coll allgather nccl 2 4 67108864 8000.00"))
        self.assertNotIn("coll allgather fused 2 4 67108864", text)  # beyond <= 0
        self.assertNotIn("coll reducescatter nccl 1 1", text)
        # the cost model compares the measured times: reduce-scatter's fused kernel costs more
        # beyond the GEMM than NCCL's collective, so that shape stays unfused
        self.assertEqual(probe(self.out, "path", "gemm_reducescatter", 2, 8, 4096, 132)[1],
                         "unfused")
        # ... and all-gather's costs less (at 2 MiB gathered: the smallest record's time)
        self.assertEqual(probe(self.out, "path", "allgather_gemm", 2, 8, 4096, 132)[1], "fused")
        # without the records the link model fuses that reduce-scatter
        self.assertEqual(probe(self.base, "path", "gemm_reducescatter", 2, 8, 4096, 132)[1],
                         "fused")

    def test_split_get(self):
        self.assertEqual(probe(self.out, "split", "gemm_allreduce", 2, 4, 4096, 132)[1],
                         "16 16 16")
        self.assertEqual(probe(self.out, "split", "gemm_allreduce", 2, 4, 2048, 132)[1], "8 8 8")
        self.assertEqual(probe(self.out, "split", "gemm_allreduce", 1, 8, 4096, 132)[1], "8 0 8")
        # scaled to another share: 16 of 132 -> 8 of 66
        self.assertEqual(probe(self.out, "split", "gemm_allreduce", 2, 4, 4096, 66)[1], "8 8 8")
        self.assertEqual(probe(self.out, "split", "moe_dispatch", 2, 4, 16384, 132)[1], "44 0 0")
        self.assertEqual(probe(self.out, "split", "allgather_gemm", 2, 4, 4096, 132)[1], "none")

    def test_policy_uses_it(self):
        # the policy engine's answer with this file: the measured split, compute the rest
        self.assertEqual(probe(self.out, "policy", "gemm_allreduce", 2, 8, 8192, 132)[1],
                         "84 16 16 16")
        self.assertEqual(probe(self.out, "policy", "ring_attention", 2, 8, 1536, 132)[1],
                         "84 16 16 16")
        self.assertEqual(probe(self.out, "policy", "gemm_reducescatter", 2, 8, 4096, 132)[1],
                         "108 8 8 8")

    def model_rows(self, path):
        rows = {}
        with open(path) as f:
            for line in f:
                m = re.match(r"\s*\[MK_FUSED_(\w+)\] = \{ (\d+), (\d+), (\d+), (\d+) \},", line)
                if m:
                    rows[m.group(1)] = tuple(int(x) for x in m.groups()[1:])
        return rows

    def test_model_rows(self):
        before, after = self.model_rows(MODEL), self.model_rows(self.model_out)
        self.assertEqual(set(before), set(after))
        self.assertEqual(len(before), 6)
        # best over all M on 2 x 4 (not any one M's: 2048 wanted 8)
        self.assertEqual(after["GEMM_ALLREDUCE"], (84, 16, 16, 16))
        self.assertEqual(after["GEMM_REDUCESCATTER"], (108, 8, 8, 8))
        self.assertEqual(after["RING_ATTENTION"], (84, 16, 16, 16))
        # MoE: 44 communication CTAs in all, the roles in the row's proportions (44 : 8 : 8)
        moe_row = after["MOE_DISPATCH"]
        self.assertEqual(moe_row[0], 132 - 44)
        self.assertEqual(sum(moe_row[1:]), 44)
        self.assertGreater(moe_row[1], moe_row[2])
        self.assertEqual(moe_row[2], moe_row[3])
        # ops not measured keep their rows
        self.assertEqual(after["ALLGATHER_GEMM"], before["ALLGATHER_GEMM"])
        self.assertEqual(after["MOE_COMBINE"], before["MOE_COMBINE"])
        # nothing else in the file changed
        with open(MODEL) as a, open(self.model_out) as b:
            la, lb = a.read().splitlines(), b.read().splitlines()
        self.assertEqual(len(la), len(lb))
        changed = [i for i, (x, y) in enumerate(zip(la, lb)) if x != y]
        self.assertEqual(len(changed), 4)
        self.assertTrue(all("[MK_FUSED_" in la[i] for i in changed))

    def test_report(self):
        with open(self.report) as f:
            text = f.read()
        self.assertIn("| gemm_allreduce | 2 x 4 | 2048 | 4: 1.3000 8: 1.0000 16: 1.0500 "
                      "33: 1.4000 | 8 |", text)
        self.assertIn("| ring_attention | 2 x 4 | 1536 |", text)
        self.assertIn("| allgather_gemm | 120 8 4 0 | unchanged | no sweep on several nodes", text)
        self.assertIn("`link nvl 10.00 234.9`", text)

    def retune(self, records, *extra):
        path = os.path.join(self.tmp, "case.jsonl")
        with open(path, "w") as f:
            for r in records:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
        return run([RETUNE, "--out", os.path.join(self.tmp, "case.txt"), *extra, path])

    def test_without_base(self):
        r = self.retune(sweep_records()[:1])
        self.assertEqual(r.returncode, 0, r.stderr)
        rc, out, err = probe(os.path.join(self.tmp, "case.txt"))
        self.assertEqual((rc, out), (0, "ok splits 1 colls 0 nvl - -"), err)

    def test_bad_inputs(self):
        good = sweep_records()[0]
        r = self.retune([good, "{not json"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("case.jsonl:2: not JSON", r.stderr)
        uneven = ring(1536, 0, 1.0, {"MKERNEL_ROLE_SPLIT": "0,4,8,8"})
        r = self.retune([uneven])
        self.assertEqual(r.returncode, 1)
        self.assertIn("gives the roles different counts", r.stderr)
        r = self.retune([dict(good, share=4)])
        self.assertEqual(r.returncode, 1)
        self.assertIn("SM share 4", r.stderr)
        r = self.retune([dict(good, static={"x": 1.0})])
        self.assertEqual(r.returncode, 1)
        self.assertIn("'x' is not a CTA count", r.stderr)
        r = self.retune([{"bench": "gemm_allreduce", "m": 4096}])
        self.assertEqual(r.returncode, 1)
        self.assertIn("nothing to re-tune", r.stderr)
        # a split that leaves no compute CTA is refused, not written
        r = self.retune([dict(good, share=32, static={"16": 1.0})])
        self.assertEqual(r.returncode, 1)
        self.assertIn("leaves no compute CTA", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "nothing.txt")))

    def test_runs_of_other_speeds_compared_within_each_run(self):
        # three runs of one sweep, one of them twice as fast as the others (another build or
        # host): 4 is 4 % ahead in the fast run, 8 is 2 % and 1 % ahead in the slow ones. Medians
        # of the pooled times would take 8 (4: 10.2, 8: 10.0), which the fast run alone rules
        # out; within each run, 4 costs least over the three (geometric means of the ratios to
        # each run's fastest: 4 1.0098, 8 1.0132).
        runs = ({4: 5.0, 8: 5.2}, {4: 10.2, 8: 10.0}, {4: 10.5, 8: 10.4})
        recs = [dict(splits("gemm_allreduce_splits", 4096, 2, 2, st, 5.5, 5.5),
                     **dict(TAGS_H, share=33)) for st in runs]
        r = self.retune(recs)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "case.txt")) as f:
            self.assertIn("split gemm_allreduce 2 2 4096 33 4 4 4\n", f.read())

    def test_share_default(self):
        rec = dict(sweep_records()[0])
        del rec["share"]
        r = self.retune([rec], "--sms", "66")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "case.txt")) as f:
            self.assertIn("split gemm_allreduce 2 4 2048 66 8 8 8", f.read())


class Tag(unittest.TestCase):
    def test_rank0_tagged(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "step.log")
            with open(log, "w") as f:
                f.write('---- rank 0 (exit 0)\nrank 0: ok\n{"bench":"x","emulated":true,"v":1}\n'
                        '{broken\n[1, 2]\n---- rank 1 (exit 0)\n{"bench":"x","v":2}\n')
            r = run([TAG, "--set", "layout=h", "--set", "gpus=8", "--set", "emulated=false",
                     "--set", "machine=H200 x 8", "--env", "MKERNEL_ROLE_SPLIT=0,4,4,4", log])
            self.assertEqual(r.returncode, 0, r.stderr)
            recs = [json.loads(x) for x in r.stdout.splitlines()]
            self.assertEqual(len(recs), 1)  # rank 1's line left out
            self.assertEqual(recs[0], {"bench": "x", "emulated": False, "v": 1, "layout": "h",
                                       "gpus": 8, "machine": "H200 x 8",
                                       "env": {"MKERNEL_ROLE_SPLIT": "0,4,4,4"}})
            self.assertIn("1 line(s) starting with '{' are not JSON objects", r.stderr)

    def test_plain_log(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "plain.log")
            with open(log, "w") as f:
                f.write('noise\n{"a":1}\n{"a":2}\n')
            r = run([TAG, log])
            self.assertEqual([json.loads(x)["a"] for x in r.stdout.splitlines()], [1, 2])
            r = run([TAG, os.path.join(d, "missing.log")])
            self.assertEqual(r.returncode, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
