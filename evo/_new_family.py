"""`evo new-family NAME --device cpu|cuda`: a working family folder to start from (a C++ function or a CUDA
kernel whose knobs are macros, its short spec, an experiment file), searchable at once with
`evo search --family ./NAME` (a CUDA one where an sm_90a GPU is)."""

from __future__ import annotations

import keyword
from pathlib import Path

MAX_NAME = 64  # a family's name: also its folder's, its files' and its module's
# names the skeleton's kernel function or its macros cannot take (C, C++ and CUDA keywords and built-in types)
RESERVED = frozenset('''
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
    compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
    int long main mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    register reinterpret_cast requires restrict return short signed sizeof static static_assert static_cast struct
    switch template this thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor xor_eq __global__ __device__ __host__ __shared__ __constant__ dim3 half float2
    float4 int2 int4 uint size_t torch evo'''.split())

SPEC = '''"""{name}: out = scale * x + y in C++, a skeleton to make your own (see docs/FAMILIES.md).

    evo search --family ./{name} --budget 8      # or: evo search --experiment {name}/experiment.toml
    evo export 1 --out {name}_op && python {name}_op/selfcheck.py
"""

from evo.family import Choice, CppKernel, PowerOfTwo, Scalar, Tensor, shape

FAMILY = CppKernel(
    name="{name}",
    description="out = 2 x + y over n floats, in blocks",
    source="{name}.cpp",
    function="{name}",
    knobs=[PowerOfTwo("block", 64, 4096, description="elements per block"),
           Choice("unroll", (1, 2, 4, 8), ordered=True, description="unroll of the inner loop")],
    constraints={{"unroll_fits_block": "unroll <= block"}},
    shapes=[shape("mission", n=1 << 20, mission=True), shape("small", n=4096), shape("ragged", n=1001)],
    args=[Tensor("x", "n"), Tensor("y", "n"), Tensor("out", "n", output=True), Scalar("n")],
    reference="2 * x + y",
    anchor="torch.add(y, x, alpha=2)",
)
'''

SOURCE = '''// {name}: out[i] = 2 x[i] + y[i]. BLOCK and UNROLL are the family's knobs (evo passes -DBLOCK=...,
// -DUNROLL=..., and writes them out in #pragma lines too).
extern "C" void {name}(const float* x, const float* y, float* out, int n) {{
    for (int start = 0; start < n; start += BLOCK) {{
        const int end = start + BLOCK < n ? start + BLOCK : n;
#pragma GCC unroll UNROLL
        for (int i = start; i < end; ++i) out[i] = 2.0f * x[i] + y[i];
    }}
}}
'''

CUDA_SPEC = '''"""{name}: softmax over each row of a float32 matrix, in CUDA, against torch.softmax; a skeleton to make your
own (see docs/FAMILIES.md).

    evo search --family ./{name} --budget 40     # needs an sm_90a GPU (the H100); elsewhere built and screened
    evo export 1 --out {name}_op && python {name}_op/selfcheck.py
"""

from evo.family import Boolean, Choice, CudaKernel, PowerOfTwo, Scalar, Tensor, shape

FAMILY = CudaKernel(
    name="{name}",
    description="softmax over the rows of x (rows x cols, float32)",
    source="{name}.cu",
    function="{name}",
    knobs=[PowerOfTwo("threads", 32, 1024, description="threads of the block that takes one row"),
           Choice("unroll", (1, 2, 4, 8), ordered=True, description="unroll of the loops over a row"),
           Boolean("exp2", description="exp2f of x * log2(e) instead of expf")],
    shapes=[shape("mission", rows=4096, cols=1024, mission=True), shape("wide", rows=256, cols=8192),
            shape("ragged", rows=1000, cols=777)],
    args=[Tensor("x", "rows, cols"), Tensor("out", "rows, cols", output=True), Scalar("rows"), Scalar("cols")],
    grid="rows", block="THREADS",
    reference="torch.softmax(x, dim=-1)",
    anchor="torch.softmax(x, dim=-1)",
)
'''

CUDA_SOURCE = '''// {name}: out = softmax(x) over each row. One block of THREADS threads a row; THREADS, UNROLL and EXP2 are
// the family's knobs (evo passes -DTHREADS=..., and writes them out in #pragma lines too).
#include <math.h>

#if EXP2
#define EXP(v) exp2f((v) * 1.4426950408889634f)
#else
#define EXP(v) expf(v)
#endif

template <bool Max>
__device__ float block_reduce(float v, float* scratch) {{
    for (int offset = 16; offset > 0; offset >>= 1) {{
        const float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = Max ? fmaxf(v, other) : v + other;
    }}
    if (THREADS > 32) {{
        if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
        __syncthreads();
        const int lane = threadIdx.x % 32;  // every warp sums the warps' partials: all threads get the total
        v = lane < THREADS / 32 ? scratch[lane] : (Max ? -INFINITY : 0.0f);
        for (int offset = 16; offset > 0; offset >>= 1) {{
            const float other = __shfl_xor_sync(0xffffffffu, v, offset);
            v = Max ? fmaxf(v, other) : v + other;
        }}
        __syncthreads();  // scratch is used again by the next reduction
    }}
    return __shfl_sync(0xffffffffu, v, 0);
}}

extern "C" __global__ void __launch_bounds__(THREADS) {name}(const float* __restrict__ x, float* __restrict__ out,
                                                            int rows, int cols) {{
    __shared__ float scratch[32];
    const float* in = x + (size_t)blockIdx.x * cols;
    float* o = out + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
#pragma unroll UNROLL
    for (int i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, in[i]);
    m = block_reduce<true>(m, scratch);
    float s = 0.0f;
#pragma unroll UNROLL
    for (int i = threadIdx.x; i < cols; i += THREADS) s += EXP(in[i] - m);
    const float inv = 1.0f / block_reduce<false>(s, scratch);
#pragma unroll UNROLL
    for (int i = threadIdx.x; i < cols; i += THREADS) o[i] = EXP(in[i] - m) * inv;
}}
'''

EXPERIMENT = '''# evo search --experiment {name}/experiment.toml
[search]
family = "."        # this folder (a path here is relative to this file)
budget = 24
population = 8
'''


def new_family(name: str, device: str, where: Path) -> list[Path]:
    """Write the skeleton into ``where/name``; ValueError (nothing written) if ``name`` is not a C
    identifier, the device is not one it can write, or the folder exists."""
    if len(name) > MAX_NAME:
        raise ValueError(f"family name {name[:40]!r}... is {len(name)} characters long: at most {MAX_NAME}")
    if not name.isidentifier() or not name.isascii():
        raise ValueError(f"family name {name!r} must be a C identifier (letters, digits, _; not starting with a digit)")
    if name in RESERVED or keyword.iskeyword(name):
        raise ValueError(f"family name {name!r} is a C, C++, CUDA or Python keyword (the kernel's function and the "
                         f"module take the name): choose another")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r}: cpu (a C++ function) or cuda (a CUDA kernel)")
    folder = where / name
    if folder.exists():
        raise ValueError(f"{folder} already exists; choose another name or remove it")
    if not where.is_dir():
        raise ValueError(f"{where} is not a directory")
    files = ({"spec.py": SPEC, f"{name}.cpp": SOURCE} if device == "cpu" else {"spec.py": CUDA_SPEC, f"{name}.cu": CUDA_SOURCE})
    files["experiment.toml"] = EXPERIMENT
    try:
        folder.mkdir()
        written = []
        for file, text in files.items():
            (folder / file).write_text(text.format(name=name))
            written.append(folder / file)
    except OSError as exc:
        for path in folder.glob("*"):
            path.unlink(missing_ok=True)
        folder.rmdir() if folder.exists() else None
        raise ValueError(f"cannot write {folder}: {exc.strerror or exc}") from None
    return written
