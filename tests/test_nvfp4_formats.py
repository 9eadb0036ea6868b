"""NVFP4 host formats: every e2m1 and e4m3 code, packing, and both scale layouts, both ways."""

import math

import pytest
import torch

from evo.seeds.nvfp4_gemm import formats as f


def test_every_e2m1_code_has_the_formats_value():
    expected = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert [f.e2m1_value(c) for c in range(8)] == expected
    assert [f.e2m1_value(c) for c in range(8, 16)] == [-v for v in expected]
    assert math.copysign(1.0, f.e2m1_value(8)) == -1.0  # code 8 is -0
    codes = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(f.encode_e2m1(f.decode_e2m1(codes)), codes)  # -0 keeps its sign bit
    with pytest.raises(ValueError, match="not e2m1 values"):
        f.encode_e2m1(torch.tensor([2.5]))


def test_every_byte_packs_and_unpacks_with_the_even_element_low():
    codes = torch.arange(256, dtype=torch.uint8)
    pairs = f.unpack_e2m1(codes)
    assert pairs.shape == (512,)
    assert torch.equal(pairs[0::2], codes & 15) and torch.equal(pairs[1::2], codes >> 4)
    assert torch.equal(f.pack_e2m1(pairs), codes)
    assert f.pack_e2m1(torch.tensor([3, 10], dtype=torch.uint8)).item() == 0xA3
    with pytest.raises(ValueError, match="even"):
        f.pack_e2m1(torch.zeros(3, dtype=torch.uint8))


def test_every_e4m3_code_has_the_formats_value_and_torchs():
    codes = torch.arange(256, dtype=torch.uint8)
    ours = f.decode_e4m3(codes)
    torchs = codes.view(torch.float8_e4m3fn).float()
    nan = torch.isnan(ours)
    assert nan.nonzero().flatten().tolist() == [0x7F, 0xFF]
    assert torch.equal(nan, torch.isnan(torchs)) and torch.equal(ours[~nan], torchs[~nan])
    assert f.e4m3_value(0x7E) == 448.0 and f.e4m3_value(0x01) == 2.0 ** -9 and f.e4m3_value(0x38) == 1.0
    finite = codes[~nan]
    assert torch.equal(f.encode_e4m3(f.decode_e4m3(finite)), finite)
    with pytest.raises(ValueError, match="448"):
        f.encode_e4m3(torch.tensor([500.0]))


def _blocked_by_reshaping(scales: torch.Tensor) -> torch.Tensor:
    """The blocked layout built another way: pad, cut 128 x 4 tiles, interleave each tile's 32-row groups."""
    rows, columns = scales.shape
    padded = torch.zeros(-(-rows // 128) * 128, -(-columns // 4) * 4, dtype=scales.dtype)
    padded[:rows, :columns] = scales
    tiles = padded.view(padded.shape[0] // 128, 128, padded.shape[1] // 4, 4).permute(0, 2, 1, 3)
    return tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1)


@pytest.mark.parametrize("rows,columns", [(128, 4), (256, 448), (300, 7), (1, 1), (4096, 128)])
def test_blocked_layout_both_ways(rows, columns):
    g = torch.Generator().manual_seed(rows * 1000 + columns)
    scales = torch.randint(0, 256, (rows, columns), generator=g, dtype=torch.uint8)
    blocked = f.to_blocked(scales)
    assert blocked.shape == (f.blocked_size(rows, columns),)
    assert torch.equal(blocked, _blocked_by_reshaping(scales))
    assert torch.equal(f.from_blocked(blocked, rows, columns), scales)
    batched = torch.stack([scales, scales.flip(0)])
    assert torch.equal(f.from_blocked(f.to_blocked(batched), rows, columns), batched)


def test_blocked_offsets_of_known_entries():
    offsets = f.blocked_offsets(256, 8)
    assert offsets[0, 0] == 0 and offsets[0, 3] == 3 and offsets[32, 0] == 4 and offsets[1, 0] == 16
    assert offsets[33, 5] == 512 + 16 + 4 + 1  # second column tile of the first row tile
    assert offsets[128, 0] == 2 * 512  # the second row tile starts after both column tiles
    with pytest.raises(ValueError, match="bytes"):
        f.from_blocked(torch.zeros(10, dtype=torch.uint8), 128, 4)


def test_dequantize_multiplies_each_group_of_16_by_its_scale():
    codes = torch.tensor([[2] * 16 + [15] * 16], dtype=torch.uint8)  # 1.0 then -6.0
    scales = f.encode_e4m3(torch.tensor([[0.5, 4.0]]))
    assert torch.equal(f.dequantize(f.pack_e2m1(codes), scales), torch.tensor([[0.5] * 16 + [-24.0] * 16]))
    packed, scales = f.random_operand(4, 64, 2, torch.Generator().manual_seed(0), "cpu")
    assert packed.shape == (2, 4, 32) and scales.shape == (2, 4, 4)
    values = f.decode_e4m3(scales)
    assert bool((values >= 2.0 ** -6).all() and (values < 2.0 ** -3).all())
    exact = f.dequantize(packed, scales)
    assert torch.equal(exact.bfloat16().float(), exact)  # e2m1 x e4m3 is exact in bf16


def test_a_random_problem_in_either_scale_layout_dequantises_alike():
    plain = dict(l=2, m=130, n=6, k=64, blocked=0)
    a, b, sfa, sfb = f.random_problem(plain, torch.Generator().manual_seed(3), "cpu")
    assert (a.shape, b.shape, sfa.shape, sfb.shape) == ((2, 130, 32), (2, 6, 32), (2, 130, 4), (2, 6, 4))
    blocked = (a, b, f.to_blocked(sfa), f.to_blocked(sfb))
    assert blocked[2].shape == (2, f.blocked_size(130, 4)) == (2, 2 * 512)
    expected = (f.dequantize(a, sfa).double(), f.dequantize(b, sfb).double())
    for s, operands in ((plain, (a, b, sfa, sfb)), (dict(plain, blocked=1), blocked)):
        got = f.dequantized_operands(s, operands, torch.float64)
        assert all(torch.equal(x, y) for x, y in zip(got, expected))
