#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Layers point down only: no include and no call from a lower layer into a higher one.

Layers, lowest first (docs/layout.md):
  0 util            util/, include/mk/{clock,compiler,err,hash,log,param,result}.h
  1 transport       transport/ (core + backends), include/mk/{transport,rdv,mr_cache,core_params}.h
  2 tuner           tuner/ (the policy engine)
  3 nccl_plugin     nccl_plugin/, tuner/tuner_abi.c (the tuner's NCCL face), include/mk_nccl/
  4 fused/common    fused/common/, include/mkernel.h (the public declarations every fused layer
                    implements part of)
  5 fused/gemm, fused/attn   engines, side by side
  6 fused/runtime
  7 fused/ops
Anything under test/, tools/, python/, or a tools/ or bench/ folder of a layer
(transport/tools/, fused/bench/, ...) may use every layer and is not checked. A C or CUDA file in no layer is an error: a new
folder gets its place here first.

Includes: every #include "..." of every C/CUDA file of a layer is resolved (its own folder,
include/, the repository root; generated headers are util's or transport's) and must not name a
file of a higher layer. Calls: with a build directory, every object compiled from a layer's
source (compile_commands.json) is read with nm; a symbol it needs that only higher layers define
is an error.

usage: check-layers.py REPO [BUILD]    prints each violation; exit 1 if any
"""
import json
import os
import re
import subprocess
import sys

RANK = {
    "util": 0,
    "transport": 1,
    "tuner": 2,
    "nccl_plugin": 3,
    "fused/common": 4,
    "fused/gemm": 5,
    "fused/attn": 5,
    "fused/runtime": 6,
    "fused/ops": 7,
}

# Exact files first, then folders (longest prefix wins).
FILE_LAYER = {
    "include/mkernel.h": "fused/common",
    "tuner/tuner_abi.c": "nccl_plugin",
    "include/mk/transport.h": "transport",
    "include/mk/rdv.h": "transport",
    "include/mk/mr_cache.h": "transport",
    "include/mk/core_params.h": "transport",
}
DIR_LAYER = [
    ("include/mk_nccl/", "nccl_plugin"),
    ("include/mk/", "util"),
    ("util/", "util"),
    ("transport/", "transport"),
    ("tuner/", "tuner"),
    ("nccl_plugin/", "nccl_plugin"),
    ("fused/common/", "fused/common"),
    ("fused/gemm/", "fused/gemm"),
    ("fused/attn/", "fused/attn"),
    ("fused/runtime/", "fused/runtime"),
    ("fused/ops/", "fused/ops"),
]
# Headers meson generates into the build directory.
GENERATED = {"mk_config.h": "util", "mk_git.h": "util", "mk_backends.h": "transport"}
FREE = ("test/", "tools/", "python/", "scripts/")
C_EXT = (".c", ".h", ".cu", ".cuh")


def is_free(path):
    return path.startswith(FREE) or "/tools/" in path or "/bench/" in path


def layer_of(path):
    if path in FILE_LAYER:
        return FILE_LAYER[path]
    for prefix, layer in DIR_LAYER:
        if path.startswith(prefix):
            return layer
    return None


def sources(root):
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split("\n")
        files = [f for f in out if f and os.path.exists(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, subdirs, names in os.walk(root):
            subdirs[:] = [s for s in subdirs if not s.startswith(("build", ".git"))]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    # files a change adds but git does not track yet are checked too
    try:
        extra = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.split("\n")
        files += [f for f in extra if f]
    except (OSError, subprocess.CalledProcessError):
        pass
    return sorted({f for f in files if f.endswith(C_EXT)})


def resolve(root, path, inc):
    for base in (os.path.dirname(path), "include", ""):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def check_includes(root, files):
    errors = []
    for f in files:
        if is_free(f):
            continue
        mine = layer_of(f)
        if mine is None:
            errors.append("%s: in no layer (give its folder a place in %s)" %
                          (f, os.path.basename(__file__)))
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                inc = m.group(1)
                target = resolve(root, f, inc)
                if target is None:
                    their = GENERATED.get(inc)
                    if their is None:
                        errors.append('%s:%d: includes "%s", found nowhere' % (f, n, inc))
                        continue
                else:
                    their = layer_of(target)
                    if their is None:
                        errors.append('%s:%d: includes %s, which is in no layer' %
                                      (f, n, target))
                        continue
                if RANK[their] > RANK[mine]:
                    errors.append('%s:%d: %s includes "%s" of %s, a higher layer' %
                                  (f, n, mine, inc, their))
    return errors


def nm_symbols(objects):
    """{object: (defined set, undefined set)} for the global symbols of each object."""
    out = {}
    for i in range(0, len(objects), 200):
        chunk = objects[i:i + 200]
        res = subprocess.run(["nm", "-A", "-P", "-g"] + chunk, capture_output=True, text=True)
        for line in res.stdout.split("\n"):
            if not line:
                continue
            head, _, rest = line.partition(": ")
            parts = rest.split()
            if len(parts) < 2:
                continue
            name, kind = parts[0], parts[1]
            d, u = out.setdefault(head, (set(), set()))
            if kind in ("U", "w", "v"):
                u.add(name)
            else:
                d.add(name)
    return out


def check_calls(root, build):
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        return ["%s: no compile_commands.json (configure with meson first)" % build]
    with open(db, encoding="utf-8") as fh:
        entries = json.load(fh)
    obj_layer = {}
    for e in entries:
        src = os.path.relpath(os.path.normpath(os.path.join(e["directory"], e["file"])), root)
        if src.startswith("..") or is_free(src):
            continue
        layer = layer_of(src)
        out = e.get("output")
        if layer is None or out is None:
            continue
        obj = os.path.normpath(os.path.join(e["directory"], out))
        if os.path.exists(obj):
            obj_layer[obj] = (layer, src)
    syms = nm_symbols(sorted(obj_layer))
    lowest = {}  # symbol -> lowest rank of a layer that defines it
    for obj, (layer, _) in obj_layer.items():
        for s in syms.get(obj, (set(), set()))[0]:
            lowest[s] = min(lowest.get(s, 99), RANK[layer])
    errors = []
    seen = set()
    for obj, (layer, src) in sorted(obj_layer.items(), key=lambda x: x[1][1]):
        for s in sorted(syms.get(obj, (set(), set()))[1]):
            if s in lowest and lowest[s] > RANK[layer] and (src, s) not in seen:
                seen.add((src, s))
                their = [l for l, r in RANK.items() if r == lowest[s]]
                errors.append("%s: %s calls %s, defined only in %s (higher)" %
                              (src, layer, s, " or ".join(their)))
    return errors


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    root = os.path.abspath(sys.argv[1])
    files = sources(root)
    errors = check_includes(root, files)
    what = "includes of %d files" % len(files)
    if len(sys.argv) > 2:
        errors += check_calls(root, os.path.abspath(sys.argv[2]))
        what += " and the calls of their objects"
    for e in errors:
        print(e)
    print("%s: %d upward dependenc%s" % (what, len(errors), "y" if len(errors) == 1 else "ies"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
