"""Where a run's evaluations went, design by design, up to the first kernel within its target: for every run with
a target in the given evo databases, the evaluations up to and including the first success at or under the
target, and how many of them were each design's (a design: the knobs a genome's kernel does not read,
``Space(inactive=)``). Their median bounds what sharing evaluations between designs better could gain: a
search that never evaluated the other designs would still need the target design's own evaluations.

    mkdir -p /tmp/h36 /tmp/h36b
    tar xJf docs/evidence/issue36-h100-half-timing.tar.xz -C /tmp/h36
    tar xJf docs/evidence/issue36-h100-aim-and-stop-at-gate.tar.xz -C /tmp/h36b
    python benchmarks/evaluations_by_design.py \
        --db "/tmp/h36/ev/3-default-reads/half-s*.db" "/tmp/h36b/7-default-stop-at-gate/half-s*.db"
"""

from __future__ import annotations

import argparse
import glob
import json
import sqlite3
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evo.seeds import get_family  # noqa: E402

RUN_EVALUATIONS = ("SELECT i.genome, e.status, e.fitness_s, e.reused_from FROM evaluations e JOIN individuals i "
                   "ON i.id = e.individual_id WHERE i.run_id = ? ORDER BY e.id")


def design_name(held: frozenset) -> str:
    return "reads every knob" if not held else f"holds {len(held)} knobs"


def to_target(space, db: sqlite3.Connection, run_id: int, target_s: float) -> tuple[int, Counter, int] | None:
    """(evaluations up to the first success within the target, how many of them each design had, how many of
    them were reused from earlier runs); None: no success within the target."""
    per_design: Counter = Counter()
    reused = 0
    rows = db.execute(RUN_EVALUATIONS, (run_id,)).fetchall()
    for count, (text, status, seconds, reused_from) in enumerate(rows, 1):
        held = frozenset(space.inactive(space.genome(json.loads(text)).as_dict()))
        per_design[design_name(held)] += 1
        reused += reused_from is not None
        if status == "ok" and seconds is not None and seconds <= target_s:
            return count, per_design, reused
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, nargs="+", help="globs of evo databases of runs with a target")
    parser.add_argument("--family", default="flashcore")
    args = parser.parse_args(argv)
    paths = sorted(path for pattern in args.db for path in glob.glob(pattern))
    if not paths:
        print(f"evaluations_by_design: no database matches --db {' '.join(args.db)}", file=sys.stderr)
        return 2
    space = get_family(args.family).space
    reached: list[tuple[int, Counter]] = []  # runs that reused nothing
    for path in paths:
        with sqlite3.connect(path) as db:
            runs = db.execute("SELECT id, seed, target_seconds FROM runs WHERE target_seconds IS NOT NULL").fetchall()
            for run_id, seed, target_s in runs:
                found = to_target(space, db, run_id, target_s)
                shown = "not reached" if found is None else f"{found[0]}: " + ", ".join(
                    f"{n} {name}" for name, n in sorted(found[1].items()))
                if found is not None and found[2]:
                    shown += f" ({found[2]} reused from earlier runs: not counted below)"
                print(f"{path} run {run_id} seed {seed} target {target_s * 1e6:.2f} us: {shown}")
                if found is not None and not found[2]:
                    reached.append(found[:2])
    if reached:
        names = sorted({name for _, designs in reached for name in designs})
        print(f"{len(reached)} runs from nothing reached their target; median evaluations {statistics.median(n for n, _ in reached)}; "
              + "; ".join(f"{name}: median {statistics.median(d[name] for _, d in reached)}, range "
                          f"{min(d[name] for _, d in reached)}-{max(d[name] for _, d in reached)}" for name in names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
