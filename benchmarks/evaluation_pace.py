"""Evaluations a minute of finished searches, read from their stores: over the whole run (what the run
summary prints, start-up included: Ray, the evaluators' anchor passes, the first compiles) and at the
steady pace once running (from the evaluation at 20% of the run to the last).

    python benchmarks/evaluation_pace.py run1.db run2.db ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import sqlite3
import statistics


def pace(path: str) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        (started, status), = c.execute("SELECT created_at, status FROM runs ORDER BY id LIMIT 1")
        rows = c.execute("SELECT created_at, build_s, verify_s + benchmark_s, status FROM evaluations "
                         "ORDER BY created_at").fetchall()
    if len(rows) < 5:
        return f"{path}: {len(rows)} evaluations, too few for a pace"
    times = [dt.datetime.fromisoformat(r[0]) for r in rows]
    start = dt.datetime.fromisoformat(started)
    first = len(rows) // 5
    whole = 60 * len(rows) / (times[-1] - start).total_seconds()
    steady = 60 * (len(rows) - 1 - first) / (times[-1] - times[first]).total_seconds()
    timed = [r[2] for r in rows if r[3] == "ok"]
    return (f"{path}: {len(rows)} evaluations ({status}); {whole:.0f} a minute from the run's start, "
            f"{steady:.0f} a minute steady (evaluations {first + 1}..{len(rows)}); compile median "
            f"{statistics.median(r[1] for r in rows):.2f} s, verify + time median "
            f"{statistics.median(timed) if timed else 0:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="+")
    for path in parser.parse_args().databases:
        print(pace(path))


if __name__ == "__main__":
    main()
