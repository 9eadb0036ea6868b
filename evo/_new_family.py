"""`evo new-family NAME --device cpu`: a working family folder to start from (a C++ kernel whose knobs are
macros, its short spec, an experiment file), searchable at once with `evo search --family ./NAME`."""

from __future__ import annotations

from pathlib import Path

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

EXPERIMENT = '''# evo search --experiment {name}/experiment.toml
[search]
family = "."        # this folder (a path here is relative to this file)
budget = 24
population = 8
'''


def new_family(name: str, device: str, where: Path) -> list[Path]:
    """Write the skeleton into ``where/name``; ValueError (nothing written) if ``name`` is not a C
    identifier, the device is not one it can write, or the folder exists."""
    if not name.isidentifier() or not name.isascii():
        raise ValueError(f"family name {name!r} must be a C identifier (letters, digits, _; not starting with a digit)")
    if device != "cpu":
        raise ValueError(f"--device {device!r}: new-family writes C++ (cpu) skeletons; a CUDA family is written "
                         "against the KernelFamily API (docs/FAMILIES.md)")
    folder = where / name
    if folder.exists():
        raise ValueError(f"{folder} already exists; choose another name or remove it")
    if not where.is_dir():
        raise ValueError(f"{where} is not a directory")
    files = {"spec.py": SPEC, f"{name}.cpp": SOURCE, "experiment.toml": EXPERIMENT}
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
