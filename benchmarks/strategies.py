"""The replay table: every strategy on the shared public tuning spaces (Kernel Tuner cache files of real
GPU kernels, ../shared/replay_caches), driven as the search loop drives it and batch by batch; and on
recorded evo runs given with --run DB:RUN. Prints a Markdown table for docs/BENCHMARKS.md.

    python benchmarks/strategies.py --seeds 30 --budget 400
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from evo.replay import kernel_tuner_space, markdown_table, store_space, summarize

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "replay_caches"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caches", default=str(SHARED), help="folder of Kernel Tuner cache files (*.json.gz)")
    parser.add_argument("--run", action="append", default=[], help="DB:RUN, an evo run to replay against too")
    parser.add_argument("--strategies", default="surrogate,evolution,random,optuna")
    parser.add_argument("--modes", default="loop,sync")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument("--population", type=int, default=8)
    args = parser.parse_args()
    spaces = [kernel_tuner_space(path) for path in sorted(Path(args.caches).glob("*.json.gz"))]
    for item in args.run:
        from evo.db import Database, Store, resolve_url
        from evo.seeds import get_family

        db, _, run = item.rpartition(":")
        store = Store(Database(resolve_url(db)).open(create=False))
        spaces.append(store_space(store, int(run), get_family(store.get_run(int(run)).family)))
    summaries = []
    for recorded in spaces:
        for mode in args.modes.split(","):
            for strategy in args.strategies.split(","):
                started = time.perf_counter()
                summaries.append(summarize(recorded, strategy, seeds=range(args.seeds), budget=args.budget,
                                           population=args.population, mode=mode))
                print(f"# {recorded.name} {mode} {strategy}: {time.perf_counter() - started:.0f} s", flush=True)
    print(markdown_table(summaries))


if __name__ == "__main__":
    main()
