"""Where an exported op's decisions are kept, what they depend on, and how a call is timed and checked.

Imports torch only (part of evo.runtime, which `evo export` ships whole as evo_runtime/; op.py uses it).

Decisions persist in a JSON file per op (``cache_path``): ``$EVO_OP_CACHE/<op>.json`` where that variable
names a directory, else ``~/.cache/evo/ops/<op>.json`` (under ``$XDG_CACHE_HOME`` where set), keyed by the
device's model, its driver, torch's version and the package's kernels (``device_context``), so that a
decision made on one GPU model is never applied to another. Writers take a lock file and replace the file
whole: several processes and threads may share it. ``python prepare.py`` (``prepare_main``) fills it ahead
of time for a range of shapes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

ROUND_SECONDS = 1.5e-3  # calls back to back for about this long in each round of a decision's timing
MIN_CALLS = 1


def within(out: torch.Tensor, reference: torch.Tensor, tolerance: Mapping[str, float]) -> tuple[bool, float, float]:
    """(passes, max abs error, relative L2 error) as evo verifies: every |out - ref| <= max_abs + rtol |ref|,
    and ||out - ref|| / ||ref|| <= max_rel_l2; NaN (an element never written) fails."""
    reference = reference.to(torch.float64)
    difference = out.to(torch.float64) - reference
    max_abs = difference.abs().max().item() if difference.numel() else 0.0
    rel_l2 = (difference.norm() / reference.norm().clamp_min(1e-30)).item() if difference.numel() else 0.0
    beyond = int((difference.abs() > tolerance["max_abs"] + tolerance.get("rtol", 0.0) * reference.abs()).sum())
    ok = math.isfinite(max_abs) and math.isfinite(rel_l2) and beyond == 0 and rel_l2 <= tolerance["max_rel_l2"]
    return ok, max_abs if math.isfinite(max_abs) else math.inf, rel_l2 if math.isfinite(rel_l2) else math.inf


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(run: Callable[[], Any], device: torch.device, seconds: float = ROUND_SECONDS) -> float:
    """Seconds per call of ``run`` as a caller sees it: calls back to back, the host's cost included (CUDA
    events around the whole series: where the host is slower than the GPU, the GPU waits and that counts)."""
    _synchronize(device)
    start = time.perf_counter()
    run()
    _synchronize(device)
    calls = max(MIN_CALLS, min(200, int(seconds / max(time.perf_counter() - start, 1e-7))))
    return series_time(run, calls, device)


def series_time(run: Callable[[], Any], calls: int, device: torch.device) -> float:
    """Seconds per call of ``calls`` calls of ``run`` back to back: CUDA events around the series (the host's cost
    counts where the GPU waits for it), or perf_counter on the CPU."""
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(calls):
            run()
        return (time.perf_counter() - start) / calls
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        run()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3 / calls


def device_context(device: torch.device) -> str:
    """What a decision depends on besides the package: the device's model and driver, and torch."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"{torch.cuda.get_device_name(index)} sm_{major}{minor}, driver {_driver()}, torch {torch.__version__}"
    return f"{_cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def _driver() -> str:
    with contextlib.suppress(OSError, IndexError):
        line = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
        return next(word for word in line.split() if word.count(".") >= 1 and word[0].isdigit())
    with contextlib.suppress(Exception):
        from cuda.bindings import driver

        return f"CUDA {driver.cuDriverGetVersion()[1]}"
    return "unknown"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cache_path(op_name: str) -> Path:
    """Where the op's decisions are kept: $EVO_OP_CACHE/<op>.json, else ~/.cache/evo/ops/<op>.json."""
    folder = os.environ.get("EVO_OP_CACHE")
    if not folder:
        folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evo" / "ops"
    return Path(folder) / f"{op_name}.json"


class DecisionFile:
    """Decisions on disk, {context: {bucket: record}}; read at first use, merged on every write under an
    exclusive lock (``<file>.lock``) and replaced whole, so concurrent writers lose nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unwritable: str | None = None  # why the file could not be written (decisions then stay in memory)

    def read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def add(self, context: str, bucket: str, record: dict) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path.with_suffix(".lock"), "a") as lock:
                _lock(lock)
                data = self.read()
                data.setdefault(context, {})[bucket] = record
                temporary = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                temporary.write_text(json.dumps(data, indent=0, sort_keys=True))
                os.replace(temporary, self.path)
        except OSError as error:
            self.unwritable = f"{self.path}: {error.strerror or error}"


def _lock(handle) -> None:
    with contextlib.suppress(ImportError):
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the handle closes


def bucket_key(dims: Mapping[str, int]) -> str:
    return ",".join(f"{k}={int(v)}" for k, v in sorted(dims.items()))


def parse_ranges(arguments: Sequence[str], dimensions: Sequence[str]) -> list[dict[str, int]]:
    """Shapes from NAME=VALUE, NAME=LOW:HIGH or NAME=LOW:HIGH:STEP (both ends included), one for every
    dimension in ``dimensions``: the product of the ranges. ValueError naming what is wrong."""
    ranges: dict[str, range] = {}
    for argument in arguments:
        name, _, value = argument.partition("=")
        if name not in dimensions:
            raise ValueError(f"{argument!r}: the dimensions are {', '.join(dimensions)} (NAME=VALUE or NAME=LOW:HIGH[:STEP])")
        try:
            parts = [int(part) for part in value.split(":")]
        except ValueError:
            raise ValueError(f"{argument!r}: a whole number or LOW:HIGH[:STEP]") from None
        low, high, step = (parts[0], parts[0], 1) if len(parts) == 1 else (*parts, 1)[:3]
        if len(parts) > 3 or high < low or step < 1:
            raise ValueError(f"{argument!r}: a whole number or LOW:HIGH[:STEP] with LOW <= HIGH and STEP >= 1")
        ranges[name] = range(low, high + 1, step)
    missing = [d for d in dimensions if d not in ranges]
    if missing:
        raise ValueError(f"give every dimension: {', '.join(missing)} missing")
    shapes: list[dict[str, int]] = [{}]
    for name in dimensions:
        shapes = [dict(shape, **{name: value}) for shape in shapes for value in ranges[name]]
    return shapes


def prepare_main(argv: Sequence[str], here: Path) -> int:
    """`python prepare.py NAME=LOW:HIGH ...` in an exported package: its op decides every bucket of those
    shapes on this machine's GPU (``--device``), so that first calls cost nothing."""
    import argparse
    import importlib
    import sys

    metadata = json.loads((here / "metadata.json").read_text())
    dimensions = [k for k in metadata["shapes"][0] if k not in ("name", "mission")]
    parser = argparse.ArgumentParser(prog="prepare.py", description=prepare_main.__doc__.split("\n")[0])
    parser.add_argument("dims", nargs="+", help=f"NAME=VALUE or NAME=LOW:HIGH[:STEP] for each of {', '.join(dimensions)}")
    parser.add_argument("--device", default=None, help="the CUDA device (default: the current one)")
    options = parser.parse_args(argv)
    try:
        shapes = parse_ranges(options.dims, dimensions)
    except ValueError as error:
        print(f"prepare.py: {error}", file=sys.stderr)
        return 2
    module = importlib.import_module(metadata["module"])  # the op's module, beside this file
    started = time.perf_counter()
    measured = module.prepare(shapes, options.device)
    print(f"{measured} bucket(s) decided in {time.perf_counter() - started:.1f} s for {len(shapes)} shape(s); "
          f"decisions in {module.OP.file.path}" + (f" (NOT WRITTEN: {module.OP.file.unwritable})" if module.OP.file.unwritable else ""))
    return 0
