"""wgmma wrappers for the Hopper families, generated per accumulator width (the inline assembly
names every accumulator register, so each N needs its own text)."""

from __future__ import annotations

OPERAND_TYPES = ("bf16", "f16")
A_SOURCES = ("shared", "registers")


def wgmma_wrapper(name: str, n: int, operand_type: str, a_source: str = "shared", *, b_mn_major: bool = False,
                  overwrite: bool = False) -> str:
    """CUDA source of ``name(d, a, b, accumulate = true)``: wgmma m64{n}k16, ``operand_type`` x
    ``operand_type`` -> fp32, B from shared memory (a K-major descriptor b; with ``b_mn_major`` an
    N-major one, the instruction's transpose-B immediate set), A either from shared
    memory too (a K-major descriptor, ``uint64_t a``) or from registers (``a_source = "registers"``:
    the warp's 16 x 16 fragment in mma.sync's A layout, ``const uint32_t (&a)[4]``);
    D = A B + D, or D = A B when ``accumulate`` is false. With ``overwrite`` it is ``name(d, a, b)``, always
    D = A B, its accumulators outputs only: the compiler need not keep their old values live for it."""
    if operand_type not in OPERAND_TYPES:
        raise ValueError(f"operand_type must be one of {OPERAND_TYPES}, not {operand_type!r}")
    if a_source not in A_SOURCES:
        raise ValueError(f"a_source must be one of {A_SOURCES}, not {a_source!r}")
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"n must be a multiple of 8 in [8, 256], not {n}")
    count = n // 2
    outputs = ", ".join(f"%{i}" for i in range(count))
    constraints = ", ".join(f'"{"=" if overwrite else "+"}f"(d[{i}])' for i in range(count))
    trans_b = int(b_mn_major)
    if a_source == "shared":
        a_param, a_operand, a_inputs, flags = "uint64_t a", f"%{count}", '"l"(a)', f"1, 1, 0, {trans_b}"
        b_index = count + 1
    else:  # registers: no transpose immediate for A
        a_param = "const uint32_t (&a)[4]"
        a_operand = "{" + ", ".join(f"%{count + i}" for i in range(4)) + "}"
        a_inputs = ", ".join(f'"r"(a[{i}])' for i in range(4))
        flags, b_index = f"1, 1, {trans_b}", count + 4
    accumulate = '"n"(0)' if overwrite else '"r"(int(accumulate))'
    parameters = f"float (&d)[{count}], {a_param}, uint64_t b" + ("" if overwrite else ", bool accumulate = true")
    return (f"__device__ __forceinline__ void {name}({parameters}) {{\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{b_index + 1}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{operand_type}.{operand_type} {{{outputs}}}, '
            f'{a_operand}, %{b_index}, p, {flags};\\n}}"\n'
            f'                 : {constraints}\n                 : {a_inputs}, "l"(b), {accumulate});\n}}\n')
