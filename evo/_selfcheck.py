"""Self-check of an exported evo kernel or workload op: re-verify every shape, re-time it against the anchor.

    python selfcheck.py            # exit 0: every shape within tolerance (an op: and never slower); 1: not
    python selfcheck.py --cold-cache   # time each call after flushing the cache (--no-cold-cache: warm)

A single kernel's package: every shape of its family, the kernel against the family's anchor (and the
module's OTHER_ANCHORS, each printed below it). A workload's op: every workload shape, the op as a user
calls it against PyTorch's own computation of the same result (what the op falls back to), the two timed
in turns sample by sample (graph replays; on a GPU also eager calls back to back, printed below each row); a shape where the op's time over PyTorch's, pair by pair, is above
1 + SLOWER_BEYOND beyond the timing's noise (the lower 95% confidence bound of its median above it) fails,
as a wrong result does.

Standalone: imports torch and what is beside it (the exported module; evo_runtime/, evo's runtime package:
its cache flush, and its samples queued behind a spin kernel so that no host gap is timed, captured and
sized as evo's benchmark does), never evo. Fresh random inputs per shape; the output is poisoned (NaN) before the op
writes it, so an unwritten element fails; everything is timed the same way in this process, with cold
caches when the search timed that way (metadata's ``cold_cache``) unless a flag says otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the exported module and evo_runtime/ beside this file

from evo_runtime import bandwidth  # noqa: E402
from evo_runtime.decisions import time_calls, within  # noqa: E402  (the op's own timing and check)
from evo_runtime.flush import reading_flush  # noqa: E402
from evo_runtime.queued import SpinQueue, capture  # noqa: E402

SLOWER_BEYOND = 0.02  # the op may be this much slower than the anchor (timing noise) before it fails
ROUNDS = 3  # rounds of the op and the anchor timed in turns (evo's end-of-run confirmation times as many)
AGREEMENT = 0.15  # rounds whose ratios lie further apart are unsteady: no speedup is claimed (evo's gate's too)
PAIRS = 40  # pairs of op and anchor calls a round
COLD_PAIRS = 16  # ... with cold caches: each call follows a flush (reading twice the cache), which is slow


def _time_cold(run, device: str, samples: int = 50) -> float:
    """Median seconds per call, each after the cache is flushed (as evo times with --cold-cache):
    on CUDA one call between two events, the whole batch queued behind a spin kernel."""
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
    return statistics.median(SpinQueue.shared().batch([(flush, run)] * samples))


def _time(run, device: str, samples: int = 15) -> float:
    """Median seconds per call: CUDA events around replays of a graph of back-to-back calls lasting at
    least 500 us, queued behind a spin kernel (as evo times), or perf_counter per call on the CPU."""
    for _ in range(3):
        run()
    values = []
    if device == "cuda":
        queue = SpinQueue.shared()
        burst = queue.burst(run)
        values = [seconds / burst for seconds in queue.batch([(None, capture(run, burst))] * samples)]
    else:
        for _ in range(samples):
            start = time.perf_counter()
            run()
            values.append(time.perf_counter() - start)
    return statistics.median(values)


def _paired(op, anchor, device: str, cold: bool, samples: int = PAIRS) -> tuple[float, float, float, float]:
    """The op and the anchor timed in turns, sample by sample (which goes first alternates), so that a
    drift of the clocks or a busy neighbour touches both alike: (op's median, anchor's median, the median
    of the op's time over the anchor's, pair by pair, and that median's lower 95% confidence bound, from the
    order statistics of the ratios). Each sample: on CUDA a replay of a graph of calls
    lasting at least 500 us between events, or with cold caches one call after the flush; on the CPU one
    call (after the flush, cold)."""
    flush = None
    if cold:
        flush = reading_flush(device)
    runs = [op, anchor]
    for run in runs * 3:
        run()
    pairs: list[list[float]] = []
    if device == "cuda":
        queue, burst = SpinQueue.shared(), 1
        if not cold:
            burst = min(queue.burst(run) for run in runs)
            runs = [capture(run, burst) for run in runs]
        order = [index for number in range(samples) for index in ((0, 1) if number % 2 == 0 else (1, 0))]
        times = queue.batch([(flush, runs[index]) for index in order])  # every sample queued behind one spin
        for number in range(samples):
            pair = [0.0, 0.0]
            for index, seconds in zip(order[2 * number: 2 * number + 2], times[2 * number: 2 * number + 2]):
                pair[index] = seconds / burst
            pairs.append(pair)
    else:
        for number in range(samples):
            pair = [0.0, 0.0]
            for index in (0, 1) if number % 2 == 0 else (1, 0):
                if flush is not None:
                    flush()
                start = time.perf_counter()
                runs[index]()
                pair[index] = time.perf_counter() - start
            pairs.append(pair)
    ratios = sorted(p[0] / p[1] for p in pairs)
    low = ratios[max(0, int(len(ratios) / 2 - 1.96 * math.sqrt(len(ratios)) / 2))]  # the median's 95% bound
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs), statistics.median(ratios), low


@dataclass(frozen=True)
class Rounds:
    """ROUNDS rounds of the op (kernel) and the anchor timed in turns (``_paired``), as evo's summary times its
    headline: the rounds' ratios must agree within AGREEMENT, else the speedup is unsteady (no number)."""

    op_s: float  # medians over the rounds
    anchor_s: float
    ratios: tuple[float, ...]  # each round's median of the op's time over the anchor's, pair by pair
    lows: tuple[float, ...]  # each round's lower 95% bound of that median

    @property
    def steady(self) -> bool:
        return max(self.ratios) <= min(self.ratios) * (1 + AGREEMENT)

    @property
    def speedup(self) -> float:
        return 1 / statistics.median(self.ratios)

    def slower(self, beyond: float) -> bool:
        """Slower than the anchor beyond the noise in every round (even each round's lower bound is above)."""
        return min(self.lows) > 1 + beyond

    def text(self) -> str:
        """The speedup and its span over the rounds, or why none is claimed."""
        if not self.steady:
            return f"unsteady (rounds {1 / max(self.ratios):.2f}-{1 / min(self.ratios):.2f}x)"
        return f"{self.speedup:.2f}x ({1 / max(self.ratios):.2f}-{1 / min(self.ratios):.2f}x)"




def _rounds(op, anchor, device: str, cold: bool) -> Rounds:
    done = [_paired(op, anchor, device, cold, COLD_PAIRS if cold else PAIRS) for _ in range(ROUNDS)]
    return Rounds(statistics.median(d[0] for d in done), statistics.median(d[1] for d in done),
                  tuple(d[2] for d in done), tuple(d[3] for d in done))


def _eager(op, anchor, rounds: int = 9) -> tuple[float, float]:
    """Median seconds per call of the op and of the anchor called eagerly back to back (the host's cost counts
    where it exceeds the GPU's), in turns; evo_runtime's decisions.time_calls, as the op decides."""
    device = torch.device("cuda", torch.cuda.current_device())
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for index, run in enumerate((op, anchor)):
            times[index].append(time_calls(run, device, 5e-3))
    return statistics.median(times[0]), statistics.median(times[1])


def _verify(kernel, shape: dict, inputs, tolerance: dict) -> tuple[bool, float, float]:
    """(passes, max abs error, relative L2 error): the op written into a poisoned output, and the op as
    called, against the reference."""
    out = kernel.make_output(shape)
    out.fill_(float("nan"))
    kernel.launch(shape, inputs, out)
    outputs = [out]
    if hasattr(kernel, "run"):
        outputs.append(kernel.run(shape, inputs).reshape(out.shape))
    if kernel.DEVICE == "cuda":
        torch.cuda.synchronize()

    reference = kernel.reference(shape, inputs)
    ok, worst_abs, worst_rel = True, 0.0, 0.0
    for got in outputs:
        passed, max_abs, rel_l2 = within(got, reference, tolerance)
        ok &= passed
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, rel_l2)
    return ok, worst_abs, worst_rel


def _differs(what: str, now: float, then: float | None, spread: float = 0.0) -> str:
    """A note where a time measured here lies further from the one recorded at export than that one's spread
    (its p90 over its median, at least 5%) explains twice over: another machine, or a busy one."""
    if not then or now <= 0:
        return ""
    allowed = 2 * max(spread, 0.05)
    if abs(now / then - 1) <= allowed:
        return ""
    return (f"{what}: {now * 1e6:.2f} us here against {then * 1e6:.2f} us at export ({now / then:.2f}x, beyond the "
            f"{allowed:.0%} its spread explains)")


def _recorded(rows: list, shape: str) -> tuple[float | None, float]:
    """(median, spread) of a shape's timing recorded at export."""
    row = next((r for r in rows or () if r.get("shape") == shape), None)
    if not row or not row.get("median_s"):
        return None, 0.0
    return row["median_s"], max(0.0, row.get("p90_s", row["median_s"]) / row["median_s"] - 1)


def _inputs(kernel, shape: dict, index: int):
    generator = torch.Generator(device=kernel.DEVICE)
    generator.manual_seed(int(time.time_ns() % (1 << 62)) + index)
    return kernel.make_inputs(shape, generator)


def _check_kernel(kernel, metadata: dict, timer, cold: bool) -> bool:
    """A single kernel: every shape verified, then timed in turns with the anchor in ROUNDS rounds (the speedup,
    its span over the rounds, or "unsteady"), then the other anchors."""
    tolerance, failed, notes = metadata["tolerance"], False, []
    width = max([10] + [len(shape["name"]) for shape in metadata["shapes"]])
    print(f"{'shape':>{width}} {'max abs err':>12} {'rel L2 err':>11} {'kernel':>11} {'anchor':>11} "
          f"{'speedup (rounds)':>20}  verdict")
    for index, shape in enumerate(metadata["shapes"]):
        inputs = _inputs(kernel, shape, index)
        ok, max_abs, rel_l2 = _verify(kernel, shape, inputs, tolerance)
        failed |= not ok
        # the kernel writing a fresh output each call, as the anchor does (as evo's confirmation times it)
        rounds = _rounds(lambda: kernel.launch(shape, inputs, kernel.make_output(shape)),
                         lambda: kernel.anchor(shape, inputs), kernel.DEVICE, cold)
        own, anchor = rounds.op_s, rounds.anchor_s
        print(f"{shape['name']:>{width}} {max_abs:12.3g} {rel_l2:11.3g} {own * 1e6:9.2f}us {anchor * 1e6:9.2f}us "
              f"{rounds.text():>20}  {'ok' if ok else 'FAILED'}")
        _say_bandwidth(metadata, shape["name"], own, anchor, width)
        for note in (_differs("the kernel", own, *_recorded(metadata.get("timings"), shape["name"])),
                     _differs("the anchor", anchor, *_recorded(metadata.get("anchor_timings"), shape["name"]))):
            if note:
                notes.append(f"{shape['name']}: {note}")
                print(f"{'':>{width}} note: {note}")
        for name, other in getattr(kernel, "OTHER_ANCHORS", {}).items():  # timed the same way
            seconds = _time_other(timer, lambda: other(shape, inputs), kernel.DEVICE)
            print(f"{'':>{width}} {'':>12} {'':>11} {'':>11} " + (
                f"{seconds * 1e6:9.2f}us {seconds / own:7.2f}x  anchor: {name}" if seconds else
                f"{'-':>11} {'-':>8}  anchor: {name} (cannot run this shape)"))
    _say_differences(notes)
    return failed


def _say_bandwidth(metadata: dict, shape: str, own: float, anchor: float, width: int) -> None:
    """A memory-bound family's: the op's and the anchor's bytes a second against this GPU's read bandwidth."""
    moved = metadata.get("bytes_moved", {}).get(shape)
    if moved:
        read = bandwidth.read_bandwidth()
        print(f"{'':>{width}} bandwidth: this {bandwidth.describe(moved, own, read)}; anchor "
              f"{bandwidth.describe(moved, anchor, read)} (read bandwidth {read / 1e12:.2f} TB/s here)")


def _time_other(timer, run, device: str) -> float | None:
    """Another implementation's time, as the anchor's is taken; None where it cannot run the shape (a backend
    that refuses it)."""
    try:
        return timer(run, device)
    except RuntimeError:
        if device == "cuda":
            torch.cuda.synchronize()
        return None


def _say_differences(notes: list[str]) -> None:
    if notes:
        print(f"times here differ from those recorded at export at {len(notes)} place(s), beyond their spread: the "
              f"figures above are this machine's now, not the search's")


def _check_op(kernel, metadata: dict, timer, cold: bool) -> bool:
    """A workload's op: every workload shape verified, then the op as called and PyTorch's computation
    timed in turns (``_paired``); slower beyond SLOWER_BEYOND fails."""
    tolerance, failed, notes = metadata["tolerance"], False, []
    recorded = {row["shape"]: row for row in metadata["table"]}
    others = {name: other for name, other in getattr(kernel, "OTHER_ANCHORS", {}).items()
              if name not in getattr(kernel, "COSTLY_ANCHORS", ())}
    if kernel.fallback is not kernel.anchor:  # the family's own anchor too, named by its docstring
        others = {(kernel.anchor.__doc__ or "the family's anchor").strip().rstrip("."): kernel.anchor, **others}
    width = max([10] + [len(shape["name"]) for shape in metadata["shapes"]])
    print(f"{'shape':>{width}} {'runs':>17} {'max abs err':>11} {'op':>11} {'anchor':>11} {'speedup':>8} "
          f"{'at export':>19}  verdict")
    speedups = []
    for index, shape in enumerate(metadata["shapes"]):
        dims = {k: v for k, v in shape.items() if k != "name"}
        inputs = _inputs(kernel, shape, index)
        ok, max_abs, _ = _verify(kernel, shape, inputs, tolerance)
        choice, _ = kernel.choose(dims)
        rounds = _rounds(lambda: kernel.run(shape, inputs), lambda: kernel.fallback(shape, inputs), kernel.DEVICE, cold)
        op, anchor, ratio = rounds.op_s, rounds.anchor_s, 1 / rounds.speedup
        slower = rounds.slower(SLOWER_BEYOND)  # slower beyond the noise in every round
        failed |= not ok or slower
        speedups.append((1 / ratio, recorded.get(shape["name"], {}).get("weight", 1.0)))
        row = recorded.get(shape["name"], {})
        then = (f"{row['kernel_s'] * 1e6:.1f}/{row['anchor_s'] * 1e6:.1f}us" if row.get("kernel_s") and row.get("anchor_s")
                else "-")
        verdict = "FAILED" if not ok else ("SLOWER" if slower else "ok" if rounds.steady else "ok (unsteady timing)")
        print(f"{shape['name']:>{width}} {choice or 'PyTorch':>17} {max_abs:11.3g} {op * 1e6:9.2f}us "
              f"{anchor * 1e6:9.2f}us {1 / ratio:7.2f}x {then:>19}  {verdict}")
        _say_bandwidth(metadata, shape["name"], op, anchor, width)
        op_then = row.get("kernel_s") if row.get("choice") not in (None, "pytorch") else row.get("anchor_s")
        if kernel.DEVICE == "cuda":  # as a model calls it: eager calls, the host's cost included
            eager_op, eager_anchor = _eager(lambda: kernel.run(shape, inputs), lambda: kernel.fallback(shape, inputs))
            print(f"{'':>{width}} {'eager calls':>17} {'':>11} {eager_op * 1e6:9.2f}us {eager_anchor * 1e6:9.2f}us "
                  f"{eager_anchor / eager_op:7.2f}x")
        for note in (_differs("the op", op, op_then), _differs("the anchor", anchor, row.get("anchor_s"))):
            if note:
                notes.append(f"{shape['name']}: {note}")
                print(f"{'':>{width}} note: {note}")
        for name, other in others.items():  # timed the same way
            seconds = _time_other(timer, lambda: other(shape, inputs), kernel.DEVICE)
            print(f"{'':>{width}} {'':>17} {'':>11} {'':>11} " + (
                f"{seconds * 1e6:9.2f}us {seconds / op:7.2f}x {'':>19}  anchor: {name}" if seconds else
                f"{'-':>11} {'-':>8} {'':>19}  anchor: {name} (cannot run this shape)"))
    _say_differences(notes)
    total = sum(w for _, w in speedups)
    geomean = math.exp(sum(w * math.log(s) for s, w in speedups) / total)
    print(f"weighted geometric-mean speedup of the op over {metadata['anchor_name']}: {geomean:.2f}x; "
          f"an op slower than it by more than {SLOWER_BEYOND:.0%} beyond the timing's noise in each of "
          f"{ROUNDS} rounds fails")
    return failed


def main() -> int:
    metadata = json.loads((HERE / "metadata.json").read_text())
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-cache", action=argparse.BooleanOptionalAction,
                        default=metadata.get("cold_cache", False),
                        help="time each call after flushing the cache (default: as the search timed)")
    cold = parser.parse_args().cold_cache
    timer = _time_cold if cold else _time
    kernel = importlib.import_module(metadata["module"])
    tolerance = metadata["tolerance"]
    workload = metadata.get("workload")
    what = (f"workload {workload['name']}'s op ({len(metadata['kernels'])} kernels)" if workload
            else f"genome {metadata['genome_id']} (individual {metadata['individual']})")
    print(f"{metadata['family']} {what}, run {metadata['run']}; anchor: {metadata['anchor_name']}; "
          f"caches {'cold' if cold else 'warm'}")
    print(f"passes where every |out - ref| <= {tolerance['max_abs']:g}"
          + (f" + {tolerance['rtol']:g} |ref|" if tolerance.get("rtol") else "")
          + f" and the relative L2 error <= {tolerance['max_rel_l2']:g}")
    if kernel.DEVICE == "cuda":
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    threads = (metadata.get("hardware") or {}).get("threads")
    if kernel.DEVICE != "cuda" and threads:  # PyTorch's threads as the search timed it (torch's default there)
        torch.set_num_threads(int(threads))
        print(f"PyTorch threads: {threads}, as the search timed it")
    failed = _check_op(kernel, metadata, timer, cold) if workload else _check_kernel(kernel, metadata, timer, cold)
    print("self-check " + ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
