"""Inject every CUDA fault kind into a real search on the GPU and account for every candidate.

    python benchmarks/fault_injection.py --db faults.db [--budget 72] [--eval-timeout 300s]

Runs `evo search` on the test family `cuda_axpy` (tests/families/cuda_axpy.py), whose `mode` knob
makes a candidate write wrong values, NaN, nothing, out of bounds (illegal address) or spin
forever (stopped by the watchdog derived from the anchor, far below the default cap); with the
random strategy and a budget of 72 every genome of the space is tried. Then
reads the database back and prints, per fault kind, how many were injected, how many were
recorded with the status that fault must give, and how many candidates have no stored
evaluation at all (lost: must be 0). Exit 1 if any is lost or recorded with another status.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPECTED = {"ok": "ok", "wrong": "incorrect", "nan": "incorrect", "nowrite": "incorrect",
            "illegal_address": "crashed", "hang": "timeout"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="SQLite file or URL for the run (must not hold runs yet)")
    parser.add_argument("--budget", type=int, default=72, help="evaluations (72 = the whole space)")
    parser.add_argument("--eval-timeout", default="300s", help="the watchdog's hard cap for one evaluation")
    args = parser.parse_args()

    experiment = Path(tempfile.mkdtemp()) / "faults.toml"
    experiment.write_text(f'[search]\nfamily = "tests.families.cuda_axpy:FAMILY"\nstrategy = "random"\n'
                          f'budget = {args.budget}\neval_timeout = "{args.eval_timeout}"\ntrials = 1\n')
    started = time.monotonic()
    search = subprocess.run([sys.executable, "-m", "evo", "search", "--experiment", str(experiment), "--db", args.db],
                            cwd=REPO)
    wall = time.monotonic() - started
    print(f"evo search exit code {search.returncode}, {wall:.0f} s")

    from evo.db import Database, Store, resolve_url

    store = Store(Database(resolve_url(args.db)).open(create=False))
    run = store.list_runs()[-1]
    evaluated = {row.individual_id: row for row in store.evaluations(run.id)}
    injected, as_expected, other, lost = Counter(), Counter(), Counter(), Counter()
    messages = {}
    for entry in store.history(run.id):
        mode = entry.genome["mode"]
        injected[mode] += 1
        row = evaluated.get(entry.individual_id)
        if row is None:
            lost[mode] += 1
        elif row.status == EXPECTED[mode]:
            as_expected[mode] += 1
            messages.setdefault(mode, row.message)
        else:
            other[mode] += 1
            messages[mode] = f"{row.status}: {row.message}"
    print(f"run {run.id}: {sum(injected.values())} candidates, {len(evaluated)} evaluations stored; "
          f"watchdog {(run.hardware or {}).get('watchdog')}\n")
    print("| fault (mode) | injected | expected status | recorded so | other status | lost | example message |")
    print("|---|---|---|---|---|---|---|")
    for mode in EXPECTED:
        message = " ".join((messages.get(mode) or "").split()).replace("|", "/")[:90]
        print(f"| {mode} | {injected[mode]} | {EXPECTED[mode]} | {as_expected[mode]} | {other[mode]} | "
              f"{lost[mode]} | {message} |")
    faults = sum(n for mode, n in injected.items() if mode != "ok")
    print(f"\nfaults injected {faults}, survived (search went on, recorded as expected) "
          f"{sum(n for mode, n in as_expected.items() if mode != 'ok')}, evaluations lost {sum(lost.values())}")
    return 0 if search.returncode in (0, 3) and not lost and not other else 1


if __name__ == "__main__":
    sys.exit(main())
