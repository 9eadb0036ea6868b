"""Self-check of an exported evo kernel: re-verify on every shape, re-time against the anchor.

    python selfcheck.py            # exit 0: every shape within tolerance; 1: a check failed

Standalone: imports torch and the exported module beside this file, never evo. Fresh random
inputs per shape; the output is poisoned (NaN) before the kernel runs, so an unwritten element
fails; the kernel and the anchor are timed the same way in this process.
"""

from __future__ import annotations

import importlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _replay(run, burst: int):
    """A CUDA graph of ``burst`` back-to-back calls (no host launch overhead in the figure), or the
    plain calls if the work cannot be captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # warm-up off the default stream, as capture requires
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(burst):
                run()
        torch.cuda.synchronize()
        return graph.replay
    except RuntimeError:
        torch.cuda.synchronize()
        return lambda: [run() for _ in range(burst)]


def _time(run, device: str, samples: int = 15, burst: int = 50) -> float:
    """Median seconds per call: CUDA events around replays of a graph of ``burst`` calls (as evo
    times), or perf_counter per call on the CPU."""
    for _ in range(3):
        run()
    values = []
    if device == "cuda":
        replay = _replay(run, burst)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(samples):
            begin.record()
            replay()
            end.record()
            end.synchronize()
            values.append(begin.elapsed_time(end) * 1e-3 / burst)
    else:
        for _ in range(samples):
            start = time.perf_counter()
            run()
            values.append(time.perf_counter() - start)
    return statistics.median(values)


def main() -> int:
    metadata = json.loads((HERE / "metadata.json").read_text())
    sys.path.insert(0, str(HERE))
    kernel = importlib.import_module(metadata["module"])
    tolerance = metadata["tolerance"]
    print(f"{metadata['family']} genome {metadata['genome_id']} (run {metadata['run']}, individual "
          f"{metadata['individual']}); anchor: {metadata['anchor_name']}")
    if kernel.DEVICE == "cuda":
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    failed = False
    print(f"{'shape':>10} {'max abs err':>12} {'rel L2 err':>11} {'kernel':>11} {'anchor':>11} {'speedup':>8}  verdict")
    for index, shape in enumerate(metadata["shapes"]):
        generator = torch.Generator(device=kernel.DEVICE)
        generator.manual_seed(int(time.time_ns() % (1 << 62)) + index)
        inputs = kernel.make_inputs(shape, generator)
        out = kernel.make_output(shape)
        out.fill_(float("nan"))
        kernel.launch(shape, inputs, out)
        if kernel.DEVICE == "cuda":
            torch.cuda.synchronize()
        reference = kernel.reference(shape, inputs).to(torch.float64)
        difference = (out.to(torch.float64) - reference)
        max_abs = difference.abs().max().item()
        rel_l2 = (difference.norm() / reference.norm().clamp_min(1e-30)).item()
        ok = math.isfinite(max_abs) and max_abs <= tolerance["max_abs"] and rel_l2 <= tolerance["max_rel_l2"]
        failed |= not ok
        own = _time(lambda: kernel.launch(shape, inputs, out), kernel.DEVICE)
        anchor = _time(lambda: kernel.anchor(shape, inputs), kernel.DEVICE)
        print(f"{shape['name']:>10} {max_abs:12.3g} {rel_l2:11.3g} {own * 1e6:9.2f}us {anchor * 1e6:9.2f}us "
              f"{anchor / own:7.2f}x  {'ok' if ok else 'FAILED'}")
    print("self-check " + ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
