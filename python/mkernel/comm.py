# SPDX-License-Identifier: Apache-2.0
"""mkernel.Comm: an mkComm over a torch.distributed NCCL process group.

Where the communicator comes from (``MKERNEL_COMM_SOURCE``):

* ``group`` (default): the group's own ``ncclComm_t`` from ``ProcessGroupNCCL._comm_ptr()``
  (torch >= 2.8; it returns 0 while the group has not created its communicator on the current
  device, which torch does lazily at the first collective unless ``init_process_group`` got a
  ``device_id``). A 0 is answered by one one-element ``all_reduce`` on the group, which makes
  torch create it, and a second look. mkernel then shares NCCL's connections with torch: no
  second communicator, no second bootstrap.
* ``dedicated``, or when the group cannot give its pointer (``_comm_ptr`` missing, still 0): a
  communicator of mkernel's own, ``ncclCommInitRank`` through the NCCL library torch loaded,
  its unique id published by the group's rank 0 in the group's store. It costs a second set of
  NCCL connections and is destroyed with the mkComm.

One Comm per group (``Comm.get``); it is destroyed (collectively, bounded by its timeout) when
``torch.distributed.destroy_process_group`` tears the group down, or at interpreter exit; a
comm with an error, or whose group is already gone, is aborted locally instead, so exit never
waits on a dead peer.
"""
import atexit
import ctypes
import functools
import logging
import os
import threading

from . import _lib

log = logging.getLogger("mkernel")


def _dist():
    import torch.distributed as dist

    return dist


def resolve_group(group=None):
    """The ProcessGroup for `group` (None: the default group; a str: a group name)."""
    dist = _dist()
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("group: torch.distributed is not initialised "
                           "(call torch.distributed.init_process_group('nccl', ...) first)")
    if group is None:
        return dist.distributed_c10d._get_default_group()
    if isinstance(group, str):
        return dist.distributed_c10d._resolve_process_group(group)
    return group


def group_name(group=None):
    """The name torch.ops.mkernel.* take for `group` (None: the default group)."""
    return resolve_group(group).group_name


def check_nccl_group(group, what="group"):
    """Raise ValueError unless `group` runs the NCCL backend (the only one with a ncclComm_t)."""
    dist = _dist()
    backend = str(dist.get_backend(group)).lower()
    if "nccl" not in backend:
        raise ValueError(f"{what}: must be a process group with the NCCL backend, got "
                         f"'{backend}' (mkernel runs over the group's NCCL communicator; "
                         "create one with torch.distributed.new_group(backend='nccl'))")


class _Nccl:
    """The few NCCL entry points a dedicated communicator needs, from torch's libnccl."""

    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_char * 128)]

    def __init__(self):
        paths = _lib._mapped_path("libnccl")
        if len(paths) != 1:
            raise RuntimeError(f"a dedicated NCCL communicator needs the one libnccl torch "
                               f"loaded; this process maps {paths or 'none'}")
        self.lib = ctypes.CDLL(paths[0])
        self.lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(self.UniqueId)]
        self.lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                              self.UniqueId, ctypes.c_int]
        self.lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
        self.lib.ncclCommAbort.argtypes = [ctypes.c_void_p]


def _group_store(group):
    dist = _dist()
    c10d = dist.distributed_c10d
    try:
        return c10d._world.pg_map[group][1]
    except (AttributeError, KeyError, IndexError, TypeError):
        return dist.PrefixStore(f"mkernel/{group.group_name}/", c10d._get_default_store())


def _dedicated_comm(group, serial):
    nccl = _Nccl()
    store = _group_store(group)
    key = f"mkernel/{group.group_name}/ncclUniqueId/{serial}"
    uid = _Nccl.UniqueId()
    if group.rank() == 0:
        _lib.check("ncclGetUniqueId", nccl.lib.ncclGetUniqueId(ctypes.byref(uid)))
        store.set(key, bytes(uid))
    raw = store.get(key)
    ctypes.memmove(ctypes.addressof(uid), raw, min(len(raw), ctypes.sizeof(uid)))
    comm = ctypes.c_void_p()
    _lib.check("ncclCommInitRank",
               nccl.lib.ncclCommInitRank(ctypes.byref(comm), group.size(), uid, group.rank()))
    return comm.value, nccl


def _group_comm_ptr(group, device):
    """(ncclComm_t, how) from the group itself, or (0, why not)."""
    import torch

    try:
        backend = group._get_backend(torch.device("cuda", device))
    except RuntimeError as e:
        return 0, f"the group has no CUDA backend ({e})"
    get = getattr(backend, "_comm_ptr", None)
    if get is None:
        return 0, f"{type(backend).__name__} has no _comm_ptr() (torch {torch.__version__})"
    ptr = int(get())
    if ptr:
        return ptr, "the group's own communicator"
    # Not created yet on this device: one tiny collective makes torch create it.
    t = torch.zeros(1, device=torch.device("cuda", device))
    _dist().all_reduce(t, group=group)
    torch.cuda.current_stream(device).synchronize()
    ptr = int(get())
    if ptr:
        return ptr, "the group's own communicator (created by a one-element all_reduce)"
    return 0, "_comm_ptr() still 0 after a collective on the group"


class Comm:
    """An mkComm bound to one NCCL process group and the current CUDA device.

    Prefer ``Comm.get(group)`` (cached per group). Collective: every rank of the group creates
    it in the same order. ``timeout_ms`` bounds every wait of the device runtime
    (``MKERNEL_TIMEOUT``), ``heap_bytes`` is the symmetric heap per rank (``MKERNEL_SYMM_HEAP``).
    """

    _cache = {}
    _cache_lock = threading.RLock()
    _serial = {}

    def __init__(self, group=None, *, timeout_ms=None, heap_bytes=None):
        import torch

        self.group = resolve_group(group)
        check_nccl_group(self.group)
        if not torch.cuda.is_available():
            raise RuntimeError("Comm: no CUDA device (mkernel's communicators live on a GPU)")
        self.name = self.group.group_name
        self.rank = self.group.rank()
        self.size = self.group.size()
        self.device = torch.cuda.current_device()
        self.timeout_ms = timeout_ms
        info = _lib.load()
        self._lib = info.cdll
        self._nccl = None
        self._own_nccl = None
        self._symm = []
        self._symm_cap = 0
        ptr, how = 0, ""
        if os.environ.get("MKERNEL_COMM_SOURCE", "group") != "dedicated":
            ptr, how = _group_comm_ptr(self.group, self.device)
        else:
            how = "MKERNEL_COMM_SOURCE=dedicated"
        if not ptr:
            serial = Comm._serial.get(self.name, 0)
            Comm._serial[self.name] = serial + 1
            reason = how
            ptr, self._nccl = _dedicated_comm(self.group, serial)
            self._own_nccl = ptr
            how = f"a dedicated NCCL communicator ({reason})"
        self.source = how
        cfg = _lib.make_config(heap_bytes=heap_bytes, timeout_ms=timeout_ms)
        handle = ctypes.c_void_p()
        rc = self._lib.mkCommInit(ptr, ctypes.byref(cfg), ctypes.byref(handle))
        if rc != 0:
            self._destroy_own_nccl(abort=True)
            _lib.check("mkCommInit", rc, f"group {self.name}, rank {self.rank}/{self.size}")
        self.handle = handle.value
        log.info("mkernel: Comm over group %s (rank %d of %d, cuda:%d) from %s", self.name,
                 self.rank, self.size, self.device, how)

    @classmethod
    def get(cls, group=None, **config):
        """The cached Comm of `group`, created collectively at the first call (with `config`:
        timeout_ms, heap_bytes; later calls return the cached one as it is)."""
        pg = resolve_group(group)
        with cls._cache_lock:
            comm = cls._cache.get(pg.group_name)
            if comm is not None and comm.group is pg and comm.handle is not None:
                return comm
            comm = cls(pg, **config)
            cls._cache[pg.group_name] = comm
            return comm

    @classmethod
    def cached(cls, group=None):
        """The cached Comm of `group`, or None (never creates one)."""
        pg = resolve_group(group)
        comm = cls._cache.get(pg.group_name)
        return comm if comm is not None and comm.group is pg and comm.handle else None

    def async_error(self):
        """The ncclResult_t of the first error this comm's proxy or kernels hit (0: none)."""
        if self.handle is None:
            return 0
        err = ctypes.c_int(0)
        _lib.check("mkCommGetAsyncError", self._lib.mkCommGetAsyncError(self.handle,
                                                                         ctypes.byref(err)))
        return err.value

    def check(self):
        """Raise MkernelError naming the error if an earlier call of this comm failed."""
        if self.handle is None:
            raise RuntimeError(f"Comm of group {self.name} was destroyed")
        err = self.async_error()
        if err != 0:
            raise _lib.MkernelError(f"mkernel comm of group {self.name} (rank {self.rank})", err,
                                    "an earlier call failed on the device or in the proxy "
                                    "(dead peer or timeout)")

    def symmetric(self, nbytes):
        """Two uint8 tensors (send, receive) of >= nbytes in the symmetric heap. Collective the
        first time a size above the current capacity is asked for (every rank asks alike)."""
        import torch

        if nbytes <= self._symm_cap:
            return self._symm_views
        torch.cuda.current_stream().synchronize()  # earlier calls may still use the old ones
        self._free_symm()
        cap = max(int(nbytes), 2 * self._symm_cap, 1 << 20)
        ptrs = []
        for _ in range(2):
            p = ctypes.c_void_p()
            _lib.check("mkMemAlloc", self._lib.mkMemAlloc(self.handle, cap, ctypes.byref(p)),
                       f"{cap} bytes (MKERNEL_SYMM_HEAP bounds the heap)")
            ptrs.append(p.value)
        self._symm = ptrs
        self._symm_cap = cap
        self._symm_views = tuple(_device_bytes(p, cap, self.device) for p in ptrs)
        return self._symm_views

    def _free_symm(self):
        for p in reversed(self._symm):
            self._lib.mkMemFree(self.handle, p)
        self._symm, self._symm_cap, self._symm_views = [], 0, None

    def _destroy_own_nccl(self, abort):
        if self._own_nccl and self._nccl is not None:
            fn = self._nccl.lib.ncclCommAbort if abort else self._nccl.lib.ncclCommDestroy
            fn(self._own_nccl)
        self._own_nccl = None

    def destroy(self):
        """Collective: every rank's pending work drained, then freed (bounded by the timeout).
        A comm with an async error is aborted instead (its peers may be gone)."""
        if self.handle is None:
            return
        if self.async_error() != 0:
            self.abort()
            return
        import torch

        torch.cuda.set_device(self.device)  # the exit watchdog's thread starts on device 0
        self._free_symm()
        h, self.handle = self.handle, None
        rc = self._lib.mkCommDestroy(h)
        self._destroy_own_nccl(abort=rc != 0)
        Comm._forget(self)
        _lib.check("mkCommDestroy", rc, f"group {self.name}")

    def abort(self):
        """Local: stop the proxy and free everything without talking to any peer."""
        if self.handle is None:
            return
        import torch

        torch.cuda.set_device(self.device)
        h, self.handle = self.handle, None
        self._symm, self._symm_cap, self._symm_views = [], 0, None
        self._lib.mkCommAbort(h)
        self._destroy_own_nccl(abort=True)
        Comm._forget(self)

    @classmethod
    def _forget(cls, comm):
        with cls._cache_lock:
            if cls._cache.get(comm.name) is comm:
                del cls._cache[comm.name]

    def __repr__(self):
        state = "live" if self.handle else "destroyed"
        return f"<mkernel.Comm group={self.name} rank={self.rank}/{self.size} {state}>"


class _CudaBytes:
    """A device buffer described by __cuda_array_interface__, so torch can view it."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2, "strides": None,
                                         "stream": None}


def _device_bytes(ptr, nbytes, device):
    import torch

    return torch.as_tensor(_CudaBytes(ptr, nbytes), device=torch.device("cuda", device))


def destroy(group=None):
    """Destroy mkernel's Comm of `group` (None: every cached Comm). Collective."""
    with Comm._cache_lock:
        if group is None:
            comms = list(Comm._cache.values())
        else:
            pg = resolve_group(group)
            comms = [c for c in Comm._cache.values() if c.group is pg]
    for c in comms:
        c.destroy()


def _group_alive(comm):
    dist = _dist()
    try:
        return dist.is_initialized() and comm.group in dist.distributed_c10d._world.pg_map
    except Exception:  # noqa: BLE001 - torch internals moved: treat as gone, abort locally
        return False


def _at_exit():
    """Never waits on a dead peer: healthy comms of live groups are destroyed under a watchdog
    (the comm's own timeout bounds every wait; this bounds the call); the rest are aborted."""
    for comm in list(Comm._cache.values()):
        try:
            if not _group_alive(comm) or comm.async_error() != 0:
                comm.abort()
                continue
            t = threading.Thread(target=comm.destroy, daemon=True)
            t.start()
            limit = (comm.timeout_ms or int(os.environ.get("MKERNEL_TIMEOUT", "30000"))) / 1e3
            t.join(2 * limit + 5)
            if t.is_alive():
                log.warning("mkernel: destroying the Comm of group %s at exit did not finish "
                            "within %.0f s; leaving it to the process exit", comm.name, limit)
        except Exception as e:  # noqa: BLE001 - exit must go on
            log.warning("mkernel: at exit, Comm of group %s: %s", comm.name, e)


def install_hooks():
    """Destroy a group's Comm before torch tears the group's NCCL communicator down (the Comm
    uses it), and every Comm at exit. Idempotent."""
    dist = _dist()
    if not dist.is_available():
        return
    c10d = dist.distributed_c10d
    orig = c10d.destroy_process_group
    if getattr(orig, "_mkernel_hook", False):
        return

    @functools.wraps(orig)
    def destroy_process_group(group=None):
        try:
            if group is None:
                destroy(None)
            else:
                for c in list(Comm._cache.values()):
                    if c.group is group:
                        c.destroy()
        except Exception as e:  # noqa: BLE001 - torch's teardown must still run
            log.warning("mkernel: destroying the Comm before the group: %s", e)
        return orig(group)

    destroy_process_group._mkernel_hook = True
    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group
    atexit.register(_at_exit)
