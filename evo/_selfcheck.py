"""Self-check of an exported evo kernel: re-verify on every shape, re-time against the anchor.

    python selfcheck.py            # exit 0: every shape within tolerance; 1: a check failed
    python selfcheck.py --cold-cache   # time each call after flushing the cache (--no-cold-cache: warm)

The anchor is the family's (metadata's anchor_name); a module may name other implementations to
compare with in OTHER_ANCHORS (name -> callable like its anchor), each timed and printed below it.

Standalone: imports torch and the files beside it (the exported module; ``evo_flush.py``, the
cache flush evo's timing uses), never evo. Fresh random inputs per shape; the output is poisoned
(NaN) before the kernel runs, so an unwritten element fails; the kernel and the anchor are timed the same way in this process, with cold caches when the
search timed that way (metadata's ``cold_cache``) unless a flag says otherwise.
"""

from __future__ import annotations

import argparse
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


def _time_cold(run, device: str, samples: int = 50) -> float:
    """Median seconds per call, each after the cache is flushed (as evo times with --cold-cache):
    on CUDA one call between two events, the whole batch queued behind a spin kernel."""
    from evo_flush import reading_flush  # evo's fitness/_flush.py, shipped beside this file

    flush = reading_flush(device)
    for _ in range(3):
        flush()
        run()
    values = []
    if device != "cuda":
        for _ in range(samples):
            flush()
            start = time.perf_counter()
            run()
            values.append(time.perf_counter() - start)
        return statistics.median(values)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(samples)]
    torch.cuda._sleep(100_000_000)  # ~50 ms: the host queues every call before the GPU reaches them
    for begin, end in events:
        flush()
        begin.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(begin.elapsed_time(end) * 1e-3 for begin, end in events)


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-cache", action=argparse.BooleanOptionalAction,
                        default=metadata.get("cold_cache", False),
                        help="time each call after flushing the cache (default: as the search timed)")
    cold = parser.parse_args().cold_cache
    timer = _time_cold if cold else _time
    sys.path.insert(0, str(HERE))
    kernel = importlib.import_module(metadata["module"])
    tolerance = metadata["tolerance"]
    print(f"{metadata['family']} genome {metadata['genome_id']} (run {metadata['run']}, individual "
          f"{metadata['individual']}); anchor: {metadata['anchor_name']}; caches {'cold' if cold else 'warm'}")
    print(f"passes where every |out - ref| <= {tolerance['max_abs']:g}"
          + (f" + {tolerance['rtol']:g} |ref|" if tolerance.get("rtol") else "")
          + f" and the relative L2 error <= {tolerance['max_rel_l2']:g}")
    if kernel.DEVICE == "cuda":
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    failed = False
    width = max([10] + [len(shape["name"]) for shape in metadata["shapes"]])
    print(f"{'shape':>{width}} {'max abs err':>12} {'rel L2 err':>11} {'kernel':>11} {'anchor':>11} {'speedup':>8}  "
          "verdict")
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
        # as evo verifies: every |out - ref| <= max_abs + rtol |ref| (rtol 0 in exports that predate it)
        beyond = int((difference.abs() > tolerance["max_abs"] + tolerance.get("rtol", 0.0) * reference.abs()).sum())
        ok = math.isfinite(max_abs) and beyond == 0 and rel_l2 <= tolerance["max_rel_l2"]
        failed |= not ok
        own = timer(lambda: kernel.launch(shape, inputs, out), kernel.DEVICE)
        anchor = timer(lambda: kernel.anchor(shape, inputs), kernel.DEVICE)
        print(f"{shape['name']:>{width}} {max_abs:12.3g} {rel_l2:11.3g} {own * 1e6:9.2f}us {anchor * 1e6:9.2f}us "
              f"{anchor / own:7.2f}x  {'ok' if ok else 'FAILED'}")
        for name, other in getattr(kernel, "OTHER_ANCHORS", {}).items():  # timed the same way
            seconds = timer(lambda: other(shape, inputs), kernel.DEVICE)
            print(f"{'':>{width}} {'':>12} {'':>11} {'':>11} {seconds * 1e6:9.2f}us {seconds / own:7.2f}x  "
                  f"anchor: {name}")
    print("self-check " + ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
