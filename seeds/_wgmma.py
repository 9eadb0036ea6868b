"""wgmma wrappers for the Hopper families, generated per accumulator width (the inline assembly
names every accumulator register, so each N needs its own text)."""

from __future__ import annotations

OPERAND_TYPES = ("bf16", "f16")


def wgmma_wrapper(name: str, n: int, operand_type: str) -> str:
    """CUDA source of ``name(d, a, b, accumulate = true)``: wgmma m64{n}k16, ``operand_type`` x
    ``operand_type`` -> fp32, both operands from shared memory (K-major descriptors a, b);
    D = A B + D, or D = A B when ``accumulate`` is false."""
    if operand_type not in OPERAND_TYPES:
        raise ValueError(f"operand_type must be one of {OPERAND_TYPES}, not {operand_type!r}")
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"n must be a multiple of 8 in [8, 256], not {n}")
    count = n // 2
    outputs = ", ".join(f"%{i}" for i in range(count))
    constraints = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    return (f"__device__ __forceinline__ void {name}(float (&d)[{count}], uint64_t a, uint64_t b, bool accumulate = true) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{count + 2}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{operand_type}.{operand_type} {{{outputs}}}, '
            f'%{count}, %{count + 1}, p, 1, 1, 0, 0;\\n}}"\n'
            f'                 : {constraints}\n                 : "l"(a), "l"(b), "r"(int(accumulate)));\n}}\n')
