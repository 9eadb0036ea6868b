"""nvfp4_gemm's bit placements (seeds/nvfp4_gemm/nvfp4_bits.cuh), the code the kernels run, compiled
by nvcc for the host and run here: each turns a word of 8 e2m1 codes into 4 fp16 pairs holding each
code's value times 2^-14 exactly once, in the documented order, whatever the other codes are."""

import subprocess

import numpy as np
import pytest

from evo.fitness.build import compiler_command
from evo.seeds.nvfp4_gemm.formats import e2m1_value
from evo.seeds.nvfp4_gemm.spec import HERE

PROGRAM = r"""
#include <cstdio>
#include "nvfp4_bits.cuh"

int main() {
    unsigned w;
    while (std::scanf("%x", &w) == 1) {
        const BytePlacement bytes(w);
        std::printf("%08x %08x %08x %08x %08x %08x %08x %08x\n", shifted_pair<0>(w), shifted_pair<1>(w),
                    shifted_pair<2>(w), shifted_pair<3>(w), bytes.pair<0>(), bytes.pair<1>(), bytes.pair<2>(),
                    bytes.pair<3>());
    }
}
"""
# the value index (0..7 in the word) each placement puts in pair k's low and high halves
ORDERS = {"shifts": [(3, 7), (2, 6), (1, 5), (0, 4)], "bytes": [(0, 2), (4, 6), (1, 3), (5, 7)]}


def words() -> np.ndarray:
    """Every code at every place of a word, beside random codes elsewhere, and random words."""
    rng = np.random.default_rng(0)
    out = [rng.integers(0, 2**32, 4096, dtype=np.uint64)]
    for place in range(8):
        for code in range(16):
            others = rng.integers(0, 2**32, 16, dtype=np.uint64) & ~np.uint64(0xF << 4 * place)
            out.append(others | np.uint64(code << 4 * place))
    return np.concatenate(out).astype(np.uint32)


@pytest.mark.nvcc
def test_both_placements_put_every_code_where_documented(tmp_path):
    source = tmp_path / "bits.cu"
    source.write_text(PROGRAM)
    program = tmp_path / "bits"
    subprocess.run([compiler_command("nvcc"), "-std=c++17", "-I", str(HERE), "-o", str(program), str(source)],
                   check=True, capture_output=True)
    given = words()
    ran = subprocess.run([str(program)], input="\n".join(f"{w:08x}" for w in given), capture_output=True, text=True,
                         check=True)
    pairs = np.array([[int(x, 16) for x in line.split()] for line in ran.stdout.splitlines()], dtype=np.uint32)
    assert pairs.shape == (len(given), 8)
    codes = (given[:, None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF  # [word][value index]
    expected = np.array([e2m1_value(c) for c in range(16)])[codes] * 2.0**-14  # the formats module's decoding
    for p, (name, order) in enumerate(ORDERS.items()):
        assert sorted(i for pair in order for i in pair) == list(range(8)), name  # each value exactly once
        for k, (low, high) in enumerate(order):
            halves = pairs[:, 4 * p + k]
            for half, index in ((halves & 0xFFFF, low), (halves >> 16, high)):
                got = half.astype(np.uint16).view(np.float16).astype(np.float64)
                np.testing.assert_array_equal(got, expected[:, index], err_msg=f"{name} pair {k} value {index}")
