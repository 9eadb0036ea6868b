"""Load cubins and launch their kernels on torch tensors through ``cuda.bindings.driver``.

No torch extension is built: a family compiles its kernel with nvcc to a cubin, and this
module loads it into torch's own (primary) CUDA context and launches it on torch's current
stream, so that torch tensors, CUDA events and graphs all see the same work.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from pathlib import Path
from typing import Any, Sequence


class CudaError(RuntimeError):
    """A CUDA driver call failed; ``name`` is the driver's error name (e.g. CUDA_ERROR_ILLEGAL_ADDRESS)."""

    def __init__(self, call: str, name: str, text: str) -> None:
        super().__init__(f"{call} failed: {name} ({text})")
        self.name = name


@functools.cache
def _driver():
    from cuda.bindings import driver

    return driver


def current_stream(device: int | None = None) -> int:
    """The handle of torch's current CUDA stream on ``device`` (default: the current device)."""
    import torch

    if device is None:
        device = torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


def _check(call: str, result):
    driver = _driver()
    error, *values = result if isinstance(result, tuple) else (result,)
    if error != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(error)
        _, text = driver.cuGetErrorString(error)
        raise CudaError(call, name.decode() if name else str(error), text.decode() if text else "")
    return values[0] if len(values) == 1 else values


def ptr(tensor) -> ctypes.c_void_p:
    """A kernel argument for a tensor's device pointer (the tensor must be on the GPU)."""
    if not tensor.is_cuda:
        raise ValueError("kernel arguments must be CUDA tensors")
    return ctypes.c_void_p(tensor.data_ptr())


def require_capability(capability: tuple[int, int] = (9, 0), built_for: str = "sm_90a (H100, H200)") -> None:
    """RuntimeError unless torch's current CUDA device is of ``capability`` (what the cubin was built for)."""
    import torch

    device = torch.cuda.current_device()
    have = tuple(torch.cuda.get_device_capability(device))
    if have != tuple(capability):
        raise RuntimeError(f"this kernel is built for {built_for}; {torch.cuda.get_device_name(device)} is compute "
                           f"capability {have[0]}.{have[1]}")


@functools.cache
def multiprocessors() -> int:
    """SMs of torch's current CUDA device (asked once)."""
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def ticketed_workspace(cache: dict, key, floats: int, tickets: int, device) -> tuple[Any, Any]:
    """A kernel's global workspace for partial results (``floats`` fp32) and its zeroed ticket
    counters (``tickets`` int32, for the kernel's last_to_arrive: they count on across launches and
    are never reset), allocated at the first launch for ``key`` (a shape) and kept in ``cache`` (the
    loaded kernel's); two empty tensors when both sizes are 0."""
    import torch

    if key not in cache:
        cache[key] = (torch.empty(floats, device=device, dtype=torch.float32),
                      torch.zeros(tickets, device=device, dtype=torch.int32))
    return cache[key]


class CudaKernel:
    def __init__(self, module: "CudaModule", name: str, function: Any) -> None:
        self.module = module  # keeps the module loaded while the kernel lives
        self.name = name
        self.function = function
        self.handle = int(function)  # for the driver's launch calls through ctypes
        self._configs: dict = {}  # cuLaunchKernelEx's configurations (_LaunchConfig), by geometry
        self._lock = threading.Lock()

    def set_max_dynamic_shared(self, size: int) -> None:
        """Allow more than 48 KiB of dynamic shared memory for this kernel."""
        driver = _driver()
        attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check("cuFuncSetAttribute", driver.cuFuncSetAttribute(self.function, attribute, size))

    def blocks_per_sm(self, threads: int, shared_bytes: int) -> int:
        """How many blocks of ``threads`` threads and ``shared_bytes`` of dynamic shared memory an SM holds at once."""
        driver = _driver()
        return int(_check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                          driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, threads, shared_bytes)))

    def max_active_clusters(self, cluster: int, threads: int, shared_bytes: int, *, at_launch: bool = False) -> int:
        """How many clusters of ``cluster`` blocks of ``threads`` threads can run on the device at once;
        at least 1. The cluster size is the kernel's compile-time one, or (``at_launch``) the one a
        launch will set."""
        driver = _driver()
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = cluster, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = threads, 1, 1
        config.sharedMemBytes = shared_bytes
        if at_launch:
            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster, 1, 1
            config.attrs = [attribute]
            config.numAttrs = 1
        else:
            config.numAttrs = 0
        count = _check("cuOccupancyMaxActiveClusters", driver.cuOccupancyMaxActiveClusters(self.function, config))
        if count < 1:
            raise RuntimeError(f"no cluster of {cluster} blocks of {self.name} fits on this device")
        return int(count)

    def launch(self, grid: Sequence[int], block: Sequence[int], args: Sequence[ctypes._SimpleCData],
               shared_bytes: int = 0, stream: int | None = None, *, cluster: Sequence[int] | None = None,
               programmatic: bool = False) -> None:
        """Launch on ``stream`` (default: torch's current stream). ``args`` are ctypes values.

        ``cluster``: thread-block cluster dimensions chosen at launch (for a kernel compiled without
        ``__cluster_dims__``). ``programmatic``: a programmatic dependent launch: the kernel may start
        before the stream's previous kernel completes, once that one has executed
        ``griddepcontrol.launch_dependents``; it must execute ``griddepcontrol.wait`` before it reads
        what that kernel writes."""
        grid3, block3 = _three(grid), _three(block)
        holders = list(args)
        pointers = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        if stream is None:
            stream = current_stream()
        if cluster is None and not programmatic:
            _launch(self.handle, (*grid3, *block3, shared_bytes), None, stream, pointers, self.name)
            return
        key = (grid3, block3, shared_bytes, tuple(cluster) if cluster is not None else None, programmatic)
        with self._lock:  # one configuration per launch geometry, its stream set for each launch
            config = self._configs.get(key)
            if config is None:
                config = self._configs[key] = _LaunchConfig.made(grid3, block3, shared_bytes, cluster, programmatic)
            _launch(self.handle, None, config, stream, pointers, self.name)


def _three(dims: Sequence[int]) -> tuple[int, ...]:
    """Grid or block dimensions padded to three."""
    return tuple(dims) + (1,) * (3 - len(dims))


def _launch(handle: int, dims, config, stream: int, pointers, name: str) -> None:
    """One launch through ctypes: cuLaunchKernel with ``dims`` (grid, block, shared bytes) when ``config`` is None,
    else cuLaunchKernelEx with ``config`` (a _LaunchConfig, its stream set here); CudaError naming ``name``."""
    if config is None:
        error = _launch_kernel()(handle, *dims, stream, pointers, None)
    else:
        config.stream = stream
        error = _launch_kernel_ex()(ctypes.byref(config), handle, pointers, None)
    if error:
        _check(f"cuLaunchKernel({name})", (_driver().CUresult(error),))


@functools.cache
def _launch_kernel():
    """The driver's cuLaunchKernel called through ctypes: the cheapest way from Python to a launch."""
    function = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    function.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): an id, padding to 8 bytes, a 64-byte value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]

    @classmethod
    def made(cls, grid3, block3, shared_bytes: int, cluster, programmatic: bool) -> "_LaunchConfig":
        """A launch's configuration with its attributes (a cluster's dimensions, a programmatic dependent
        launch), which it keeps alive; its stream is set before each launch."""
        attributes = []
        if cluster is not None:
            attributes.append(_LaunchAttribute(CLUSTER_DIMENSION, b"", (ctypes.c_uint32 * 16)(
                *(tuple(cluster) + (1,) * (3 - len(cluster))))))
        if programmatic:
            attributes.append(_LaunchAttribute(PROGRAMMATIC_SERIALIZATION, b"", (ctypes.c_uint32 * 16)(1)))
        kept = (_LaunchAttribute * max(1, len(attributes)))(*attributes)
        config = cls((ctypes.c_uint * 3)(*grid3), (ctypes.c_uint * 3)(*block3), shared_bytes, None,
                     ctypes.cast(kept, ctypes.POINTER(_LaunchAttribute)), len(attributes))
        config.kept = kept
        return config


CLUSTER_DIMENSION, PROGRAMMATIC_SERIALIZATION = 4, 6  # CUlaunchAttributeID values (cuda.h)


@functools.cache
def _launch_kernel_ex():
    function = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    function.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


class PreparedLaunch:
    """One kernel's launch with grid, block, shared memory, launch attributes and argument slots fixed, for a call
    path that repeats it: a call puts new values into the slots (``put``, or an argument's ``value``) and launches
    (one driver call through ctypes). ``cluster`` and ``programmatic`` as ``CudaKernel.launch`` takes them.
    ``lock`` keeps two threads' calls apart."""

    def __init__(self, kernel: "CudaKernel", grid: Sequence[int], block: Sequence[int],
                 args: Sequence[ctypes._SimpleCData], shared_bytes: int = 0, *, cluster: Sequence[int] | None = None,
                 programmatic: bool = False) -> None:
        self.kernel = kernel  # keeps its module loaded
        grid3, block3 = _three(grid), _three(block)
        self.dims = [*grid3, *block3, shared_bytes]
        self.args = list(args)
        self.addresses = [ctypes.addressof(a) for a in self.args]
        self.pointers = (ctypes.c_void_p * len(self.args))(*self.addresses)
        self.lock = threading.Lock()
        self.config = None
        if cluster is not None or programmatic:
            self.config = _LaunchConfig.made(grid3, block3, shared_bytes, cluster, programmatic)

    def put(self, slot: int, value: ctypes.Structure) -> None:
        """The value of argument ``slot`` (a structure such as a tensor map), copied in."""
        ctypes.memmove(self.addresses[slot], ctypes.addressof(value), ctypes.sizeof(value))

    def launch(self, stream: int) -> None:
        _launch(self.kernel.handle, self.dims, self.config, stream, self.pointers, self.kernel.name)


class CudaModule:
    """One loaded cubin (in torch's current device's primary context)."""

    def __init__(self, cubin: bytes | Path) -> None:
        import torch

        data = cubin.read_bytes() if isinstance(cubin, Path) else bytes(cubin)
        torch.cuda.init()
        torch.cuda.synchronize()  # makes torch's primary context current on this thread
        driver = _driver()
        _check("cuInit", driver.cuInit(0))
        self.module = _check("cuModuleLoadData", driver.cuModuleLoadData(data))
        self._kernels: dict[str, CudaKernel] = {}

    def kernel(self, name: str) -> CudaKernel:
        if name not in self._kernels:
            driver = _driver()
            function = _check(f"cuModuleGetFunction({name})", driver.cuModuleGetFunction(self.module, name.encode()))
            self._kernels[name] = CudaKernel(self, name, function)
        return self._kernels[name]

    def sized_kernel(self, name: str, planned_symbol: str, expected: int, source: str) -> CudaKernel:
        """Kernel ``name``, allowed the dynamic shared memory that the module's ``planned_symbol`` (an
        int the source computes) says it plans, after checking it is what the spec sized (``expected``);
        RuntimeError naming ``source`` when the two disagree."""
        planned = self.read_ints(planned_symbol, 1)[0]
        if planned != expected:
            raise RuntimeError(f"the kernel plans {planned} bytes of shared memory, the spec {expected}: "
                               f"{source} and spec.py disagree")
        kernel = self.kernel(name)
        kernel.set_max_dynamic_shared(planned)
        return kernel

    def read_ints(self, name: str, count: int) -> list[int]:
        """``count`` 32-bit ints of the module's global (e.g. ``__constant__``) variable ``name``."""
        driver = _driver()
        address, size = _check(f"cuModuleGetGlobal({name})", driver.cuModuleGetGlobal(self.module, name.encode()))
        if size < 4 * count:
            raise ValueError(f"global {name!r} holds {size} bytes, not {count} ints")
        values = (ctypes.c_int32 * count)()
        _check("cuMemcpyDtoH", driver.cuMemcpyDtoH(ctypes.addressof(values), address, 4 * count))
        return list(values)



class TensorMapBytes(ctypes.Structure):
    """A TMA descriptor (CUtensorMap: 128 opaque bytes) as a kernel argument passed by value."""

    _fields_ = [("bits", ctypes.c_uint64 * 16)]


def _encode(tensor, dims: list[int], strides_bytes: list[int], box: list[int], swizzled: bool) -> TensorMapBytes:
    """cuTensorMapEncodeTiled for a uint8, fp16, bf16 or fp32 tensor: ``dims`` innermost first,
    out-of-bounds reads as zeros."""
    import torch

    driver = _driver()
    types = {torch.uint8: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             torch.float16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             torch.bfloat16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             torch.float32: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}
    if tensor.dtype not in types or not tensor.is_cuda or tensor.stride(-1) != 1:
        raise ValueError("a tensor map needs a uint8, fp16, bf16 or fp32 CUDA tensor whose last dimension is contiguous")
    if tensor.data_ptr() % 16 or any(stride % 16 for stride in strides_bytes):
        raise ValueError("a tensor map needs an address and strides that are multiples of 16 bytes")
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    swizzle = driver.CUtensorMapSwizzle
    encoded = _check("cuTensorMapEncodeTiled", driver.cuTensorMapEncodeTiled(
        types[tensor.dtype], len(dims), tensor.data_ptr(), [u64(d) for d in dims], [u64(s) for s in strides_bytes],
        [u32(b) for b in box], [u32(1)] * len(dims), driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzled else swizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
    out = TensorMapBytes()
    ctypes.memmove(ctypes.addressof(out), encoded.getPtr(), ctypes.sizeof(out))
    return out


def mappable(tensor) -> bool:
    """Whether a tensor map can read ``tensor`` as it is laid out (its last dimension contiguous, its address
    and every other stride multiples of 16 bytes)."""
    size = tensor.element_size()
    return (tensor.stride(-1) == 1 and tensor.data_ptr() % 16 == 0
            and all(stride * size % 16 == 0 for stride in tensor.stride()[:-1]))


class MapCache:
    """Tensor maps already encoded, by a key the caller chooses (a slot and the tensor's address, where sizes,
    strides and box are fixed): a model calls an op on the same few buffers again and again (the allocator
    hands them back), so most calls encode nothing. At most ``size`` kept, the oldest dropped first."""

    def __init__(self, size: int = 4096) -> None:
        self.size, self.maps = size, {}

    def get(self, key, encode, tensor) -> TensorMapBytes:
        """The map kept under ``key``, else ``encode(tensor)``, kept."""
        found = self.maps.get(key)
        if found is None:
            if len(self.maps) >= self.size:
                self.maps.pop(next(iter(self.maps)))
            found = self.maps[key] = encode(tensor)
        return found


def tensor_map(tensor, box_rows: int, *, swizzled: bool) -> TensorMapBytes:
    """TMA descriptor of a contiguous fp16 [..., S, D] tensor seen as [rows of all heads][S][D].

    The box is ``box_rows`` rows of all D columns; rows past S read as zeros. ``swizzled``
    selects the 128-byte swizzle in shared memory (16-byte chunks XOR row % 8, D * 2 <= 128).
    """
    if tensor.dim() < 2:
        raise ValueError("tensor_map needs a tensor of at least 2 dimensions")
    s, d = tensor.shape[-2], tensor.shape[-1]
    heads = tensor.numel() // (s * d)
    return _encode(tensor, [d, s, heads], [d * 2, s * d * 2], [d, box_rows, 1], swizzled)


def matrix_map(tensor, box_columns: int, box_rows: int, *, swizzled: bool) -> TensorMapBytes:
    """TMA descriptor of a contiguous row-major matrix [rows, columns] whose rows are multiples of
    16 bytes, boxes of ``box_rows`` x ``box_columns``; ``swizzled``: the 128-byte swizzle (a box
    row of at most 128 bytes)."""
    if tensor.dim() != 2:
        raise ValueError("matrix_map needs a 2-d tensor")
    rows, columns = tensor.shape
    return _encode(tensor, [columns, rows], [columns * tensor.element_size()], [box_columns, box_rows], swizzled)


def box_map(tensor, box: Sequence[int], *, swizzled: bool) -> TensorMapBytes:
    """TMA descriptor of a tensor of any rank and any strides a map takes (``mappable``), boxes of ``box``
    elements, innermost dimension first; out-of-bounds elements read as zeros. ``swizzled``: the
    128-byte swizzle (a box row of at most 128 bytes)."""
    if len(box) != tensor.dim():
        raise ValueError(f"box_map: a box of {len(box)} dimensions for a tensor of {tensor.dim()}")
    dims = list(reversed(tensor.shape))
    strides = [stride * tensor.element_size() for stride in reversed(tensor.stride()[:-1])]
    return _encode(tensor, dims, strides, list(box), swizzled)


def batched_byte_map(tensor, box_rows: int) -> TensorMapBytes:
    """TMA descriptor of a contiguous uint8 [batch, rows, columns] tensor (columns a multiple of 16),
    boxes of 128 bytes x ``box_rows`` rows of one batch, 128-byte swizzle; rows past ``rows`` (and
    columns past ``columns``) read as zeros, never as the next batch's."""
    import torch

    if tensor.dim() != 3 or tensor.dtype != torch.uint8:
        raise ValueError("batched_byte_map needs a 3-d uint8 tensor")
    batch, rows, columns = tensor.shape
    return _encode(tensor, [columns, rows, batch], [columns, rows * columns], [128, box_rows, 1], True)
