"""Compare the search strategies on one family: best time and anchor ratio after a budget.

    python benchmarks/compare_strategies.py --family cpu_gemm --budget 60 --repeats 2

Each search is a real run (its own SQLite file under --out); the anchor is timed by the same
evaluator process as the kernels. Prints a Markdown table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from evo.db import Database, Store, resolve_url
from evo.api import SilentReporter
from evo.search import Search, SearchConfig
from evo.fitness import start_ray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="cpu_gemm")
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--strategies", default="evolution,random,optuna")
    parser.add_argument("--out", default=None, help="directory for the run databases")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="evo-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    release = start_ray(None)
    rows = []
    try:
        for strategy in args.strategies.split(","):
            results = []
            for repeat in range(args.repeats):
                store = Store(Database(resolve_url(str(out / f"{strategy}-{repeat}.db"))).open())
                config = SearchConfig(family=args.family, strategy=strategy, budget=args.budget,
                                      population=args.population, seed=repeat, trials=1)
                started = time.monotonic()
                outcome = Search(config, store, SilentReporter()).start()
                results.append((outcome.best_fitness_s, outcome.anchor_s, time.monotonic() - started))
            best = [r[0] for r in results]
            ratios = [r[1] / r[0] for r in results]
            rows.append((strategy, statistics.median(best), statistics.median(ratios), min(ratios), max(ratios),
                         statistics.median(r[2] for r in results)))
    finally:
        release()
    console = Console(soft_wrap=True)
    console.print("| strategy | median best (us) | median speedup vs anchor | range | median wall (s) |")
    console.print("|---|---|---|---|---|")
    for strategy, best, ratio, low, high, wall in rows:
        console.print(f"| {strategy} | {best * 1e6:.1f} | {ratio:.2f}x | {low:.2f}-{high:.2f}x | {wall:.1f} |")
    console.print(f"(family {args.family}, budget {args.budget}, population {args.population}, "
                  f"{args.repeats} seeds; databases in {out})")


if __name__ == "__main__":
    main()
