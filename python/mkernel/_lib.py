# SPDX-License-Identifier: Apache-2.0
"""Finding and loading libmkernel.so, and calling its C API through ctypes.

Search order (the first library that loads and exports the core API wins):

1. ``MKERNEL_LIB``: a file, or a directory holding ``libmkernel.so.0``/``libmkernel.so``. When
   set, nothing else is tried: an explicit choice that fails is an error, not a hint.
2. next to the package: ``mkernel/lib/`` (a bundle or a wheel that carries the library), then
   the directory that holds the ``mkernel`` package and its ``../lib`` (an unpacked bundle:
   ``<bundle>/python/mkernel`` with ``<bundle>/lib``);
3. the install prefix: ``lib``, ``lib64`` and ``lib/<multiarch>`` under ``sys.prefix``,
   ``/usr/local`` (meson's default prefix) and ``/usr``;
4. the dynamic linker's own search for the soname (``LD_LIBRARY_PATH``, ``ldconfig``).

torch is imported first, so the CUDA runtime, cuBLAS and NCCL that libmkernel.so needs resolve
to the copies torch already loaded: a ``ncclComm_t`` taken from a torch process group is only
valid with the NCCL library that made it.
"""
import ctypes
import logging
import os
import sys
import sysconfig
import threading

log = logging.getLogger("mkernel")

NAMES = ("libmkernel.so.0", "libmkernel.so")
# Present in every libmkernel.so this package can drive; the fused ops are looked up one by one.
CORE_SYMBOLS = ("mkCommInit", "mkCommDestroy", "mkCommAbort", "mkCommGetAsyncError", "mkGemm")

NCCL_RESULTS = {
    0: ("ncclSuccess", "no error"),
    1: ("ncclUnhandledCudaError", "a CUDA call failed"),
    2: ("ncclSystemError", "a system or network call failed"),
    3: ("ncclInternalError", "internal error"),
    4: ("ncclInvalidArgument", "invalid argument"),
    5: ("ncclInvalidUsage", "invalid usage (configuration or call order)"),
    6: ("ncclRemoteError", "a remote rank failed or timed out"),
    7: ("ncclInProgress", "operation in progress"),
}


class LibraryNotFound(RuntimeError):
    """No libmkernel.so could be loaded; ``attempts`` lists (source, path, why) per candidate."""

    def __init__(self, attempts):
        self.attempts = list(attempts)
        lines = ["libmkernel.so could not be loaded; tried:"]
        for source, path, why in self.attempts:
            lines.append(f"  [{source}] {path}: {why}")
        lines.append("Build it (meson setup build && ninja -C build) and set MKERNEL_LIB to "
                     "build/fused/libmkernel.so, or install it (meson install).")
        super().__init__("\n".join(lines))


class MkernelError(RuntimeError):
    """A libmkernel call returned an error; ``result`` is the ncclResult_t, ``name`` its name."""

    def __init__(self, call, result, detail=""):
        self.call = call
        self.result = int(result)
        self.name, meaning = NCCL_RESULTS.get(self.result, (f"ncclResult {self.result}", "unknown"))
        msg = f"{call} failed: {self.name} ({meaning})"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class LibInfo:
    """The loaded library: ``path``, ``source`` (which search step found it), ``attempts``."""

    def __init__(self, cdll, path, source, attempts):
        self.cdll = cdll
        self.path = path
        self.source = source
        self.attempts = attempts

    def __repr__(self):
        return f"LibInfo(path={self.path!r}, source={self.source!r})"


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def _prefix_dirs():
    prefixes = []
    for p in (sys.prefix, sys.base_prefix, "/usr/local", "/usr"):
        if p and p not in prefixes:
            prefixes.append(p)
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    out = []
    for p in prefixes:
        for sub in ("lib", "lib64", os.path.join("lib", multiarch)):
            out.append(os.path.join(p, sub))
    return out


def candidates(environ=None):
    """(source, path) pairs in search order; a bare soname means the dynamic linker's search."""
    env = os.environ if environ is None else environ
    explicit = env.get("MKERNEL_LIB", "")
    if explicit:
        if os.path.isdir(explicit):
            return [("MKERNEL_LIB", os.path.join(explicit, n)) for n in NAMES]
        return [("MKERNEL_LIB", explicit)]
    pkg = _package_dir()
    parent = os.path.dirname(pkg)
    out = []
    for d in (os.path.join(pkg, "lib"), parent, os.path.join(os.path.dirname(parent), "lib")):
        out += [("package", os.path.join(d, n)) for n in NAMES]
    for d in _prefix_dirs():
        out += [("prefix", os.path.join(d, n)) for n in NAMES]
    out.append(("system", NAMES[0]))
    return out


def _mapped_path(fragment):
    """Real paths of mapped files whose name contains `fragment` (from /proc/self/maps)."""
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and fragment in os.path.basename(parts[5].strip()):
                    paths.add(os.path.realpath(parts[5].strip()))
    except OSError:
        pass
    return sorted(paths)


def try_load(source, path):
    """Load one candidate: (CDLL, None) or (None, why it cannot be used)."""
    if os.sep in path and not os.path.exists(path):
        return None, "no such file"
    try:
        cdll = ctypes.CDLL(path)
    except OSError as e:
        return None, f"dlopen failed: {e}"
    missing = [s for s in CORE_SYMBOLS if not hasattr(cdll, s)]
    if missing:
        return None, f"not libmkernel: missing {', '.join(missing)}"
    return cdll, None


_lock = threading.Lock()
_info = None
_error = None


def load(environ=None, force=False):
    """Load libmkernel.so once (or again with force) and return LibInfo; raises LibraryNotFound."""
    global _info, _error
    with _lock:
        if not force and _info is not None:
            return _info
        if not force and _error is not None:
            raise _error
        import torch  # noqa: F401  (its CUDA runtime, cuBLAS and NCCL first: see above)

        attempts = []
        for source, path in candidates(environ):
            cdll, why = try_load(source, path)
            if cdll is None:
                attempts.append((source, path, why))
                continue
            if os.sep in path:
                real = os.path.realpath(path)
            else:  # found by the dynamic linker: where it mapped it
                real = (_mapped_path("libmkernel") or [path])[0]
            _declare(cdll)
            _info = LibInfo(cdll, real, source, attempts)
            _error = None
            log.info("mkernel: loaded %s (found by %s)", real, source)
            return _info
        _info = None
        _error = LibraryNotFound(attempts)
        log.info("mkernel: %s", _error)
        raise _error


def loaded():
    """LibInfo if libmkernel.so loads, else None (the reason is in load()'s exception)."""
    try:
        return load()
    except LibraryNotFound:
        return None


def reset():
    """Forget the loaded library (tests; a new MKERNEL_LIB). The old one stays mapped."""
    global _info, _error
    with _lock:
        _info = None
        _error = None


c_void_p, c_size_t, c_int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int


class Config(ctypes.Structure):
    """mkConfig_t (include/mkernel.h)."""

    _fields_ = [
        ("size", c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("heapBytes", c_size_t),
        ("proxyThreads", c_int),
        ("queueSlots", c_int),
        ("timeoutMs", c_int),
    ]


UNDEF_INT = -2147483647 - 1
CONFIG_MAGIC = 0x6D6B6366
API_VERSION = 0 * 100 + 1


def make_config(heap_bytes=None, proxy_threads=None, queue_slots=None, timeout_ms=None):
    cfg = Config()
    cfg.size = ctypes.sizeof(Config)
    cfg.magic = CONFIG_MAGIC
    cfg.version = API_VERSION
    cfg.heapBytes = 0 if heap_bytes is None else int(heap_bytes)
    cfg.proxyThreads = UNDEF_INT if proxy_threads is None else int(proxy_threads)
    cfg.queueSlots = UNDEF_INT if queue_slots is None else int(queue_slots)
    cfg.timeoutMs = UNDEF_INT if timeout_ms is None else int(timeout_ms)
    return cfg


_CORE_ARGTYPES = {
    "mkCommInit": [c_void_p, ctypes.POINTER(Config), ctypes.POINTER(c_void_p)],
    "mkCommDestroy": [c_void_p],
    "mkCommAbort": [c_void_p],
    "mkCommGetAsyncError": [c_void_p, ctypes.POINTER(c_int)],
    "mkMemAlloc": [c_void_p, c_size_t, ctypes.POINTER(c_void_p)],
    "mkMemFree": [c_void_p, c_void_p],
    "mkGemm": [c_void_p, c_void_p, c_void_p, c_size_t, c_size_t, c_size_t, c_int, c_int, c_void_p],
}


def _declare(cdll):
    for name, argtypes in _CORE_ARGTYPES.items():
        fn = getattr(cdll, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = c_int


def function(symbol, argtypes):
    """The C function `symbol` of the loaded library, or (None, why not)."""
    try:
        info = load()
    except LibraryNotFound as e:
        first = e.attempts[-1] if e.attempts else ("", "", "nothing to try")
        return None, f"libmkernel.so not loaded (last tried [{first[0]}] {first[1]}: {first[2]})"
    fn = getattr(info.cdll, symbol, None)
    if fn is None:
        return None, f"{info.path} has no {symbol} (an older libmkernel.so)"
    if argtypes and fn.argtypes is None:
        fn.argtypes = argtypes
        fn.restype = c_int
    return fn, None


def check(call, rc, detail=""):
    """Raise MkernelError unless rc is ncclSuccess."""
    if rc != 0:
        raise MkernelError(call, rc, detail)
