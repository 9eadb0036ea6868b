"""What evicts the last-level cache before a cold-cache sample, without dirtying it.

The flush reads a buffer twice the size of the cache: writing would leave the cache full of dirty
lines whose write-back the timed run would pay (on the H100 that adds ~4 us to bf16 cuBLAS at M=128
N=7168 K=2048, and far less to a kernel reading a quarter of the bytes), which is not the state a
model's other layers leave behind.

Imports torch only: the evaluator uses it, and an exported package's ``selfcheck.py`` (evo.runtime is shipped
whole as evo_runtime/), so that an exported kernel's self-check flushes exactly as the search did.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

MIN_FLUSH_BYTES = 64 << 20  # a flush reads at least this much, whatever the cache reports
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def host_cache_bytes(cache_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The largest cache of CPU 0 as Linux's sysfs gives it ("32768K", "1M", or bytes with no
    suffix), or 0 where it gives none."""
    sizes = [0]
    for entry in cache_dir.glob("index*/size"):
        text = entry.read_text().strip().upper()
        scale = _UNITS.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in _UNITS else text
        sizes.append(int(digits) * scale if digits.isdigit() else 0)
    return max(sizes)


def flush_bytes(device: str) -> int:
    """How much a flush reads on ``device`` ("cuda" or "cpu"): twice its last-level cache (the
    current GPU's L2, or CPU 0's largest cache), and at least ``MIN_FLUSH_BYTES``."""
    if device == "cuda":
        import torch

        cache = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    elif device == "cpu":
        cache = host_cache_bytes()
    else:
        raise ValueError(f"device: expected 'cuda' or 'cpu', got {device!r}")
    return max(2 * cache, MIN_FLUSH_BYTES)


@functools.lru_cache(maxsize=None)
def reading_flush(device: str) -> Callable[[], None]:
    """A call that sums ``flush_bytes(device)`` bytes on ``device``; its buffer is made once a
    process (the evaluator times every shape of every candidate with it)."""
    import torch

    words = torch.ones(flush_bytes(device) // 4, dtype=torch.int32, device=device)
    return lambda: words.sum()
