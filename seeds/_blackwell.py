"""Build recipes of the Blackwell (sm_100a) variants: a variant's source with the shared headers
spliced in after its ``#include <stdint.h>`` (``_hopper.cuh``: mbarriers, TMA copies, the same on
sm_100a; ``_blackwell.cuh``: TMEM, tcgen05 fences, descriptors, commits and loads), ``#line``
directives keeping nvcc's messages on the files' own lines."""

from __future__ import annotations

from pathlib import Path

from evo.kernel_genome import Boolean, IntRange, PowerOfTwo
from evo.seeds._family import BuildRecipe

HERE = Path(__file__).parent
HEADERS = (HERE / "_hopper.cuh", HERE / "_blackwell.cuh")
SM100_FLAGS = ("-gencode", "arch=compute_100a,code=sm_100a", "-O3", "-std=c++17")


def sm100_recipe(source: Path, macros: dict[str, int]) -> BuildRecipe:
    """The cubin recipe of ``source`` for sm_100a with ``macros`` as -D flags."""
    text = source.read_text()
    marker = "#include <stdint.h>\n"
    if marker not in text:
        raise ValueError(f"{source.name} must include <stdint.h>: the shared headers go after it")
    head_end = text.index(marker) + len(marker)
    head, body = text[:head_end], text[head_end:]
    spliced = "".join(f'#line 1 "{header.name}"\n{header.read_text()}' for header in HEADERS)
    composed = (f'#line 1 "{source.name}"\n{head}{spliced}'
                f'#line {head.count(chr(10)) + 1} "{source.name}"\n{body}')
    flags = SM100_FLAGS + tuple(f"-D{name}={value}" for name, value in sorted(macros.items()))
    return BuildRecipe(composed, source.name, "nvcc", flags, "cubin")


def warp_role_knobs(work: str) -> list:
    """The knobs both tcgen05 variants share, as a Blackwell engineer names them; ``work`` is what the
    MMA warp goes through one at a time (a tile, a unit of a split tile)."""
    return [
        PowerOfTwo("acc_buffers", 1, 2, description=f"accumulator buffers in TMEM: with 2 the MMA warp runs the next "
                                                    f"{work}'s main loop while the epilogue warps drain this one"),
        PowerOfTwo("epilogue_warps", 4, 8, description="warps reading the accumulators out of TMEM (8: two a lane "
                                                       "quarter, each half the columns)"),
        IntRange("tmem_load_depth", 1, 2, description="TMEM loads in flight: 1 loads, waits and uses each 16 columns; "
                                                      "2 loads the next 16 while these are used"),
        Boolean("desc_broadcast", description="lane 0 of the MMA warp computes the stage's descriptors and TMEM "
                                              "addresses and broadcasts them (__shfl_sync) | every lane computes them"),
    ]
