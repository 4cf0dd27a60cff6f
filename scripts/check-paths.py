#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every repository path named in a comment or a document must exist.

Reads the comments of C, CUDA, meson, shell and Python files and the whole text of Markdown
files, and checks the names in them that point into this repository:
  - a path whose first folder is a top-level folder of the repository (fused/ops/x.c, docs/y.md,
    test/unit/ops/): the file or folder exists, or the glob (transport/core/rdv_*.c) matches, or
    it is a stem of existing files (fused/ops/gemm_allreduce_plan for .c and .h), or every
    alternative of x.{c,h} exists, or it names a
    build output by its place in the build tree (test/rdma/verbs/test-verbs-loopback: the folder
    exists and its meson.build declares that name);
  - a relative path ending in a source file name (runtime/comm.c, ../scripts/x.sh): some tracked
    file ends with it, or it resolves from the file's own folder;
  - a bare source file name (rdv_conn.c, cmdq.h): some tracked file has that name.
Names of other projects' and system files are listed in EXTERNAL below. Prose such as "GB/s" or
"connect/accept" is not a path (no top-level folder, no file extension) and is ignored.

usage: check-paths.py [repo-root]     prints each stale name with its file and line; exit 1 if any
"""
import fnmatch
import os
import re
import subprocess
import sys

SOURCE_EXT = ("c", "h", "cu", "cuh", "py", "sh", "md", "build", "in", "map", "txt")

# Files of other projects and of the system that comments and docs name on purpose, and the
# headers the build generates (fnmatch patterns).
EXTERNAL = {
    "mk_backends.h", "mk_config.h", "mk_git.h", "mkernel.map", "rdma/fi_*.h",
    "cublas_v2.h", "cublasLt.h", "cuda.h", "cuda_bf16.h", "cuda_runtime.h", "library_types.h",
    "nccl.h", "nccl_net.h", "nccl_tuner.h", "net_device.h", "infiniband/verbs.h",
    "rdma/fabric.h", "rdma/fi_rma.h", "meson.options", "ext-net/README.md",
    "ext-tuner/README.md", "plugins/net/README.md", "net_ib.cc", "param.h", "fi_log.h",
    "xnet_rma.c", "nccl_ofi_api.h", "nccl_ofi_api.cpp", "bf16_h100_gemm.cu",
}

# Paths outside the repository on purpose: the install tree and the bundle's own files
# (share/doc/..., env.sh, ../lib beside a bundle's python folder) and files a quick start asks
# the reader to create (quickstart.py).
OUTSIDE = {"share/doc/mkernel/*", "env.sh", "../lib", "quickstart.py"}

TOKEN = re.compile(
    r"(?<![\w./*\-])((?:\.\.?/)*(?:[\w.*\-]+/)+[\w.*\-{},]+/?|[\w\-]+\.(?:%s))(?![\w/])"
    % "|".join(SOURCE_EXT))


def tracked_files(root):
    """The repository's files: tracked ones and new ones git does not ignore."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, text=True, check=True).stdout
        return sorted({f for f in out.split("\n") if f and os.path.exists(os.path.join(root, f))})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, subdirs, names in os.walk(root):
            subdirs[:] = [s for s in subdirs if not s.startswith(("build", ".git"))]
            found += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return found


def comment_text(path, text):
    """The part of a file whose names must be true: comments of code, all of a document."""
    if path.endswith(".md"):
        return text
    if path.endswith((".c", ".h", ".cu", ".cuh", ".h.in")):
        # blank out everything that is not a comment (string literals too), keeping lines
        out, last = [], 0
        for m in re.finditer(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", text, re.S):
            out.append("\n" * text.count("\n", last, m.start()))
            s = m.group(0)
            out.append(s if not s.startswith('"') else "\n" * s.count("\n"))
            last = m.end()
        return "".join(out)
    name = os.path.basename(path)
    if name in ("meson.build", "meson_options.txt", "run") or path.endswith((".sh", ".py")):
        lines = []
        for line in text.split("\n"):
            i = line.find("#")
            lines.append(line[i:] if i >= 0 else "")
        return "\n".join(lines)
    return ""


class Repo:
    def __init__(self, root):
        self.root = root
        self.files = tracked_files(root)
        self.fileset = set(self.files)
        self.dirs = set()
        for f in self.files:
            parts = f.split("/")
            for i in range(1, len(parts)):
                self.dirs.add("/".join(parts[:i]))
        self.top = {f.split("/")[0] for f in self.files if "/" in f}
        self.basenames = {f.rsplit("/", 1)[-1] for f in self.files}

    def exists(self, p):
        if p in self.fileset or p in self.dirs:
            return True
        if "{" in p:  # x.{c,h}: every one of them
            return all(self.exists(q) for q in expand_braces(p))
        if any(c in p for c in "*?["):  # a glob: at least one match
            return any(fnmatch.fnmatch(f, p) or fnmatch.fnmatch(f.rsplit("/", 1)[0], p)
                       for f in self.files)
        if any(f.startswith(p + ".") for f in self.files):
            return True  # a stem: fused/ops/gemm_allreduce_plan for its .c and .h
        return self.build_output(p)

    def build_output(self, p):
        """A target named by its place in the build tree: its folder's meson.build declares it."""
        d, _, name = p.rpartition("/")
        mb = os.path.join(self.root, d, "meson.build")
        if not d or not os.path.exists(mb):
            return False
        with open(mb, encoding="utf-8") as fh:
            return re.search(r"['\"]%s['\"]" % re.escape(name), fh.read()) is not None

    def stale(self, path, token):
        t = token.rstrip("/.,;:")
        if any(fnmatch.fnmatch(t, e) for e in EXTERNAL | OUTSIDE):
            return False
        if "/" not in t:
            if t.rsplit(".", 1)[-1] not in SOURCE_EXT:
                return False
            return not any(fnmatch.fnmatch(b, t) for b in self.basenames)
        if t.startswith("../") or t.startswith("./"):
            # from the file's own folder, or from the top (commands run in the repository root)
            p = os.path.normpath(os.path.join(os.path.dirname(path), t))
            return not (self.exists(p) or self.exists(os.path.normpath(t)))
        first = t.split("/", 1)[0]
        if first in self.top:
            return not self.exists(t)
        if t.rsplit(".", 1)[-1] not in SOURCE_EXT or "." not in t.rsplit("/", 1)[-1]:
            return False  # prose: "GB/s", "connect/accept"
        return not any(f == t or f.endswith("/" + t) or fnmatch.fnmatch(f, "*/" + t)
                       for f in self.files)


def expand_braces(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(p[:m.start()] + alt + p[m.end():])
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    repo = Repo(root)
    bad = 0
    checked = 0
    for f in repo.files:
        if f.startswith("docs/data/"):
            continue
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, OSError):
            continue
        body = comment_text(f, text)
        if not body:
            continue
        checked += 1
        for m in TOKEN.finditer(body):
            before = body[max(0, m.start() - 12):m.start()]
            after = body[m.end():m.end() + 2]
            if "://" in before or before.endswith(("build/", "$build/", "BUILD/")):
                continue
            if "/" not in m.group(1) and (after[:1] in ("[", "(") or after == "->"):
                continue  # code in a comment: maps.c[o], p.c->x
            if before.endswith(("<", ">")):
                continue  # a system header <errno.h>, or a placeholder <op>_api.c
            if repo.stale(f, m.group(1)):
                line = body.count("\n", 0, m.start()) + 1
                print("%s:%d: names %s, which does not exist" % (f, line, m.group(1)))
                bad += 1
    print("%d files read, %d stale path%s" % (checked, bad, "" if bad == 1 else "s"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
