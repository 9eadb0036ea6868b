"""Kernel Tuner's own strategies on the shared public tuning spaces, in its simulation mode, measured the
way `evo replay` measures evo's strategies: the evaluations (distinct configurations, failed ones
included) needed to get within 1% and 5% of the cache's best time, and the share of runs within 5% after
given budgets. Kernel Tuner is a benchmark-only dependency: ``pip install kernel_tuner``.

    python benchmarks/kernel_tuner_replay.py --seeds 30 --budget 400
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import random
import tempfile
import time
from pathlib import Path

from evo.replay import ReplaySummary, markdown_table, quartiles, table_rows

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "replay_caches"
STRATEGIES = ("genetic_algorithm", "simulated_annealing", "dual_annealing", "diff_evo", "pso", "firefly_algorithm",
              "greedy_ils", "mls", "basinhopping", "bayes_opt", "random_sample")


def kernel_tuner_run(cache: dict, cache_file: str, strategy: str, seed: int, budget: int) -> list[float | None]:
    """The times of the distinct configurations one Kernel Tuner run evaluated, in order (None: failed)."""
    import numpy
    from kernel_tuner import tune_kernel

    keys = cache["tune_params_keys"]
    recorded = {tuple(entry[k] for k in keys) for entry in cache["cache"].values()}

    def recorded_configuration(p):  # what the cache lacks was never a valid configuration
        return tuple(p[k] for k in keys) in recorded

    numpy.random.seed(seed)
    random.seed(seed)
    results, _ = tune_kernel(cache["kernel_name"], "__global__ void unused() {}", cache["problem_size"],
                             [numpy.float32(0)], cache["tune_params"], restrictions=[recorded_configuration],
                             cache=cache_file, simulation_mode=True, strategy=strategy,
                             strategy_options={"max_fevals": budget}, verbose=False, quiet=True)
    told: dict[tuple, float | None] = {}
    for result in results:  # a strategy may revisit a configuration: it is counted once, when first seen
        point = tuple(result[k] for k in keys)
        if point not in told:
            value = result["time"]
            told[point] = float(value) if isinstance(value, (int, float)) else None
    return list(told.values())[:budget]


@contextlib.contextmanager
def plain_cache(path: Path):
    """(the cache, its best time, the path of a plain-JSON copy: Kernel Tuner reads no gzip); the copy is removed
    afterwards. A time counts where it is a positive number, as evo.replay reads the file."""
    with gzip.open(path, "rt") as handle:
        cache = json.load(handle)
    best = min(e["time"] for e in cache["cache"].values() if isinstance(e.get("time"), (int, float)) and e["time"] > 0)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as plain:
        json.dump(cache, plain)
    try:
        yield cache, best, plain.name
    finally:
        Path(plain.name).unlink()


def summarize_kernel_tuner(path: Path, strategy: str, seeds, budget: int, budgets=(50, 100, 200, 400)) -> ReplaySummary:
    needed = {0.01: [], 0.05: []}
    with plain_cache(path) as (cache, best, plain):
        for seed in seeds:
            told = kernel_tuner_run(cache, plain, strategy, seed, budget)
            for fraction, counts in needed.items():
                hit = next((i + 1 for i, t in enumerate(told) if t is not None and t <= best * (1 + fraction)), None)
                counts.append(float("inf") if hit is None else float(hit))
    success = {b: sum(1 for n in needed[0.05] if n <= b) / len(seeds) for b in budgets if b <= budget}
    return ReplaySummary(path.name.split(".")[0], f"kernel_tuner:{strategy}", "sync", len(seeds),
                         quartiles(needed[0.01]), quartiles(needed[0.05]), success)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caches", default=str(SHARED), help="folder of Kernel Tuner cache files (*.json.gz)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--budget", type=int, default=400)
    args = parser.parse_args()
    summaries = []
    for path in sorted(Path(args.caches).glob("*.json.gz")):
        for strategy in args.strategies.split(","):
            started = time.perf_counter()
            try:
                summaries.append(summarize_kernel_tuner(path, strategy, range(args.seeds), args.budget))
            except Exception as exc:  # a strategy Kernel Tuner cannot run here is reported, not fatal
                print(f"# {path.name} {strategy}: failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            print(f"# {path.name} {strategy}: {time.perf_counter() - started:.0f} s: "
                  + " | ".join(table_rows(summaries[-1:])[1][0]), flush=True)  # each row as it comes
    print(markdown_table(summaries))


if __name__ == "__main__":
    main()
