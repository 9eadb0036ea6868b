"""One flashcore genome and cuDNN SDPA at the mission shape, timed three ways in one process (GPU): the
evaluator's way (fitness.benchmark.time_runs), graph replays each behind a long spin kernel (no host gap can
be timed), and what a launch from Python costs the host; each with the CPU idle, then with every core busy.

    python benchmarks/host_gap_probe.py '{"block_m": 32, "block_n_d64": 128, ...}'

Prints one line per repeat: each time, its burst, the host's launch time, and the kernel/cuDNN ratios.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from evo.fitness import benchmark  # noqa: E402
from evo.runtime.queued import SpinQueue, capture  # noqa: E402
from evo.seeds.flashcore import runtime  # noqa: E402
from evo.seeds.flashcore.spec import FAMILY  # noqa: E402

SPIN_CYCLES = 200_000  # about 100 us: longer than queuing an event, a replay and an event


def _burn(stop) -> None:
    while not stop.is_set():
        pass


def _build(genome, folder: Path) -> Path:
    recipe = FAMILY.build_recipe(genome)
    source = folder / "flashcore.cu"
    source.write_text(recipe.source)
    seeds = Path(__file__).resolve().parents[1] / "seeds"
    subprocess.run(["nvcc", "-cubin", *recipe.flags, "-I", str(seeds), "-I", str(seeds / "flashcore"),
                    "-o", str(folder / "k.cubin"), str(source)], check=True, cwd=folder)
    return folder / "k.cubin"


def _behind_a_spin(run, samples: int = 200) -> tuple[float, int]:
    """Median seconds a launch, each graph replay (its burst sized as the evaluator sizes it) behind a spin."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    burst = SpinQueue.shared().burst(run)
    replay = capture(run, burst)
    times = []
    for _ in range(samples):
        torch.cuda._sleep(SPIN_CYCLES)
        begin.record()
        replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e-3 / burst)
    return statistics.median(times), burst


def _host_launch_s(run) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(50):
        run()
    seconds = (time.perf_counter() - started) / 50
    torch.cuda.synchronize()
    return seconds


def main() -> int:
    genome = FAMILY.space.genome(json.loads(sys.argv[1]))
    dims = dict(FAMILY.mission_shape.dims)
    loaded = runtime.load(_build(genome, Path(tempfile.mkdtemp())), genome.as_dict())
    inputs = runtime.make_inputs(dims, torch.Generator(device="cuda").manual_seed(0))
    out = runtime.make_output(dims)
    runs = {"kernel": lambda: runtime.launch(loaded, dims, inputs, out), "cudnn": lambda: runtime.anchor(dims, inputs)}
    for load in ("idle", "loaded"):
        stop = multiprocessing.Event()
        burners = [multiprocessing.Process(target=_burn, args=(stop,)) for _ in range(os.cpu_count() if load == "loaded" else 0)]
        for burner in burners:
            burner.start()
        try:  # the burners stop however this ends (a closed pipe, an interrupt)
            for repeat in range(2):
                row = {}
                for name, run in runs.items():
                    timed = benchmark.time_runs(run, "cuda", FAMILY.timing, "mission").median_s
                    spun, burst = _behind_a_spin(run)
                    row[name] = (timed, spun, burst, _host_launch_s(run))
                print(load, repeat, " | ".join(f"{n}: evaluator {a * 1e6:.2f} us, behind a spin {b * 1e6:.2f} us "
                                               f"(burst {c}), host launch {d * 1e6:.1f} us" for n, (a, b, c, d) in row.items()),
                      f"| ratio: evaluator {row['kernel'][0] / row['cudnn'][0]:.3f}, behind a spin "
                      f"{row['kernel'][1] / row['cudnn'][1]:.3f}", flush=True)
        finally:
            stop.set()
            for burner in burners:
                burner.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
