"""NVFP4 on the host: e2m1 values packed two a byte, e4m3 scales, and the two scale layouts.

- e2m1: 4 bits, sign | 2 exponent bits (bias 1) | 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6
  and their negatives. Two a byte, the element of even index in the low nibble.
- e4m3 (the "fn" variant): sign | 4 exponent bits (bias 7) | 3 mantissa bits; no infinities,
  0x7F and 0xFF are NaN, largest finite 448, smallest subnormal 2**-9.
- scales: one e4m3 per 16 consecutive K elements of a row. Plain layout: rows x K/16, row-major.
  Blocked layout (cuBLAS / CUTLASS block-scaled operands): the matrix padded to 128-row x 4-column
  tiles, tiles stored row-tile major; inside a tile of 512 bytes the entry (r, c) sits at
  (r % 32) * 16 + (r // 32) * 4 + c (four 32-row groups interleaved, "32x16").
"""

from __future__ import annotations

import math

import torch

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E4M3_MAX = 448.0
SCALE_GROUP = 16  # K elements sharing one scale
TILE_ROWS, TILE_COLUMNS = 128, 4  # a blocked scale tile


def e2m1_value(code: int) -> float:
    """The value of one e2m1 code (0..15) from the format's definition."""
    if not 0 <= code < 16:
        raise ValueError(f"e2m1 code must be in 0..15, not {code}")
    sign, exponent, mantissa = code >> 3, (code >> 1) & 3, code & 1
    magnitude = mantissa * 0.5 if exponent == 0 else 2.0 ** (exponent - 1) * (1 + mantissa / 2)
    return -magnitude if sign else magnitude


def e4m3_value(code: int) -> float:
    """The value of one e4m3 (fn) code (0..255) from the format's definition; NaN for 0x7F, 0xFF."""
    if not 0 <= code < 256:
        raise ValueError(f"e4m3 code must be in 0..255, not {code}")
    sign, exponent, mantissa = code >> 7, (code >> 3) & 15, code & 7
    if exponent == 15 and mantissa == 7:
        return math.nan
    magnitude = mantissa / 8 * 2.0 ** -6 if exponent == 0 else 2.0 ** (exponent - 7) * (1 + mantissa / 8)
    return -magnitude if sign else magnitude


E2M1_TABLE = torch.tensor([e2m1_value(c) for c in range(16)], dtype=torch.float32)
E4M3_TABLE = torch.tensor([e4m3_value(c) for c in range(256)], dtype=torch.float32)
_tables_on: dict = {}  # (table id, device) -> the table there: no host copy while a CUDA graph captures


def _table(table: torch.Tensor, device: torch.device) -> torch.Tensor:
    key = (id(table), str(device))
    if key not in _tables_on:
        _tables_on[key] = table.to(device)
    return _tables_on[key]


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of e2m1 codes (one code per uint8 element)."""
    _require_uint8(codes, "codes")
    return _table(E2M1_TABLE, codes.device)[codes.long()]


def encode_e2m1(values: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (uint8) of values that e2m1 represents exactly (signed zeros kept); ValueError otherwise."""
    magnitudes = torch.tensor(E2M1_MAGNITUDES, device=values.device)
    match = values.abs().float().unsqueeze(-1) == magnitudes
    if not bool(match.any(-1).all()):
        raise ValueError("encode_e2m1: some values are not e2m1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives)")
    sign = torch.signbit(values).to(torch.uint8) << 3
    return sign | match.float().argmax(-1).to(torch.uint8)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """Two e2m1 codes a byte along the last dimension (even index in the low nibble)."""
    _require_uint8(codes, "codes")
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_e2m1: the last dimension must be even, not {codes.shape[-1]}")
    if bool((codes > 15).any()):
        raise ValueError("pack_e2m1: codes must be in 0..15")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """The codes of packed bytes, twice as many along the last dimension."""
    _require_uint8(packed, "packed")
    return torch.stack((packed & 15, packed >> 4), dim=-1).flatten(-2)


def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of e4m3 codes (uint8)."""
    _require_uint8(codes, "codes")
    return _table(E4M3_TABLE, codes.device)[codes.long()]


def encode_e4m3(values: torch.Tensor) -> torch.Tensor:
    """e4m3 codes (uint8) of values, rounded to nearest even (torch's float8_e4m3fn conversion)."""
    if bool((values.abs() > E4M3_MAX).any()):
        raise ValueError(f"encode_e4m3: values beyond +-{E4M3_MAX} have no e4m3 code")
    return values.to(torch.float8_e4m3fn).view(torch.uint8)


def blocked_size(rows: int, columns: int) -> int:
    """Bytes of the blocked layout of a rows x columns scale matrix (padded to whole tiles)."""
    return _ceil(rows, TILE_ROWS) * TILE_ROWS * _ceil(columns, TILE_COLUMNS) * TILE_COLUMNS


def blocked_offsets(rows: int, columns: int, device=None) -> torch.Tensor:
    """For each (row, column) of a plain scale matrix, its byte offset in the blocked layout."""
    r = torch.arange(rows, device=device).unsqueeze(1)
    c = torch.arange(columns, device=device).unsqueeze(0)
    tile = (r // TILE_ROWS) * _ceil(columns, TILE_COLUMNS) + c // TILE_COLUMNS
    return tile * (TILE_ROWS * TILE_COLUMNS) + (r % 32) * 16 + (r % TILE_ROWS) // 32 * 4 + c % TILE_COLUMNS


def to_blocked(scales: torch.Tensor) -> torch.Tensor:
    """Plain [..., rows, columns] scales -> blocked [..., blocked_size] (padding bytes are 0)."""
    _require_uint8(scales, "scales")
    *batch, rows, columns = scales.shape
    out = torch.zeros(*batch, blocked_size(rows, columns), dtype=torch.uint8, device=scales.device)
    out[..., blocked_offsets(rows, columns, scales.device).flatten()] = scales.flatten(-2)
    return out


def from_blocked(blocked: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """Blocked [..., blocked_size] scales -> plain [..., rows, columns]."""
    _require_uint8(blocked, "blocked")
    if blocked.shape[-1] != blocked_size(rows, columns):
        raise ValueError(f"from_blocked: {blocked.shape[-1]} bytes, a {rows} x {columns} matrix blocked has "
                         f"{blocked_size(rows, columns)}")
    offsets = blocked_offsets(rows, columns, blocked.device)
    return blocked[..., offsets.flatten()].unflatten(-1, (rows, columns))


E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)  # between consecutive magnitudes: where rounding turns
MIDPOINTS_TABLE = torch.tensor(E2M1_MIDPOINTS, dtype=torch.float32)


def quantize(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 of a [..., rows, K] tensor (K a multiple of 16): packed e2m1 values [..., rows, K/2] and plain e4m3
    scales [..., rows, K/16], each block of 16 scaled by its largest magnitude over 6 (rounded to e4m3, at most
    448), each value rounded to the nearest e2m1 value and held within +-6. No second, per-tensor scale: the
    kernels take none."""
    if values.shape[-1] % SCALE_GROUP:
        raise ValueError(f"quantize: K must be a multiple of {SCALE_GROUP}, not {values.shape[-1]}")
    blocks = values.float().unflatten(-1, (-1, SCALE_GROUP))
    scales = (blocks.abs().amax(-1) / 6).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    scaled = blocks / decode_e4m3(scales).unsqueeze(-1).clamp_min(torch.finfo(torch.float32).tiny)
    magnitude = torch.bucketize(scaled.abs().clamp(max=6.0), _table(MIDPOINTS_TABLE, values.device))
    codes = ((torch.signbit(scaled).to(torch.uint8) << 3) | magnitude.to(torch.uint8)).flatten(-2)
    return codes[..., 0::2] | (codes[..., 1::2] << 4), scales  # pack_e2m1's packing, without its check (a sync)


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 [..., rows, K] of packed e2m1 [..., rows, K/2] times plain e4m3 scales [..., rows, K/16]."""
    values = decode_e2m1(unpack_e2m1(packed))
    k = values.shape[-1]
    if scales.shape[-1] * SCALE_GROUP != k:
        raise ValueError(f"dequantize: {scales.shape[-1]} scales a row for K = {k} (one per {SCALE_GROUP})")
    return values * decode_e4m3(scales).repeat_interleave(SCALE_GROUP, dim=-1)


def random_operand(rows: int, k: int, batch: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random packed e2m1 bytes [batch, rows, k/2] (every code) and plain e4m3 scales [batch, rows, k/16]
    of small random exponents: 2**-6 .. 2**-4 times a random mantissa (never zero, never subnormal).
    Small, so that a product of rows of K = 16384 stays near 1 and an absolute tolerance of 1e-3 is
    within fp32 accumulation: with scales near 1 the outputs reach 6e4, and where they cancel to
    near 0 even an fp32 cuBLAS GEMM misses the exact result by more than 1e-3 (measured)."""
    packed = torch.randint(0, 256, (batch, rows, k // 2), generator=generator, device=device, dtype=torch.uint8)
    exponent = torch.randint(1, 4, (batch, rows, k // SCALE_GROUP), generator=generator, device=device,
                             dtype=torch.uint8)
    mantissa = torch.randint(0, 8, exponent.shape, generator=generator, device=device, dtype=torch.uint8)
    return packed, (exponent << 3) | mantissa


def random_problem(s, generator: torch.Generator, device) -> tuple[torch.Tensor, ...]:
    """Random operands a, b, sfa, sfb of a problem ``s`` (l, m, n, k and blocked, a mapping): packed
    [l, rows, k/2] values, scales [l, rows, k/16], or blocked [l, bytes] when s["blocked"]."""
    a, sfa = random_operand(s["m"], s["k"], s["l"], generator, device)
    b, sfb = random_operand(s["n"], s["k"], s["l"], generator, device)
    if s["blocked"]:
        sfa, sfb = to_blocked(sfa), to_blocked(sfb)
    return a, b, sfa, sfb


def dequantized_operands(s, operands, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """a * sfa and b * sfb of a problem ``s`` (as random_problem's) in ``dtype``, [l, rows, k] each."""
    a, b, sfa, sfb = operands
    if s["blocked"]:
        groups = s["k"] // SCALE_GROUP
        sfa, sfb = from_blocked(sfa, s["m"], groups), from_blocked(sfb, s["n"], groups)
    return dequantize(a, sfa).to(dtype), dequantize(b, sfb).to(dtype)


def _ceil(a: int, b: int) -> int:
    return (a + b - 1) // b


def _require_uint8(t: torch.Tensor, name: str) -> None:
    if t.dtype != torch.uint8:
        raise ValueError(f"{name} must be uint8, not {t.dtype}")
