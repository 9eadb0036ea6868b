"""The corpus of public tuning spaces (benchmarks/tuning_spaces.json): fetch it, replay strategies on it, and
report the tuning set and the held-out set side by side.

    python benchmarks/tuning_spaces.py fetch --from CHECKOUT      # a git checkout (or mirror) of the source repo
    python benchmarks/tuning_spaces.py replay --strategies surrogate,random --seeds 30 --budget 400 --out runs.jsonl
    python benchmarks/tuning_spaces.py replay --kernel-tuner genetic_algorithm,simulated_annealing --out runs.jsonl
    python benchmarks/tuning_spaces.py report runs.jsonl

``fetch`` copies each space of the manifest from the source repository at its pinned commit into
``.tuning_spaces/`` (not part of the repository) and checks its sha256. ``replay`` runs each strategy on each
space as the search loop drives it (evo's strategies: batches of 8, the next asked before the last is scored;
Kernel Tuner's: its own simulation mode, one configuration at a time), one run per seed, each ending at the
first configuration within 5% of the space's best (or at the budget). A run's record (one JSON line: space,
split, strategy, seed, evaluations to within 5% or null) is appended as soon as it ends, so a long replay can be
stopped and resumed: runs already recorded are skipped. ``report`` prints, per split, each space's share of runs
within 5% after 100 evaluations and median evaluations to 5% for every strategy, the regret of each strategy
against the best of the reference strategies on that space, and the split's mean. The held-out split is
reported, never used to choose.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = Path(__file__).with_name("tuning_spaces.json")
DEFAULT_DIR = ROOT / ".tuning_spaces"
WITHIN = 0.05  # a run succeeds at its first configuration within 5% of the space's best
AT = 100  # ... and counts as quick when that is within this many evaluations
KERNEL_TUNER_PREFIX = "kt:"  # a Kernel Tuner strategy's name in the records


def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def fetch(source: Path, target: Path) -> int:
    """Each space from ``source`` (a git checkout or mirror of the manifest's repository) at the pinned commit."""
    data = manifest()
    commit = data["source"]["commit"]
    target.mkdir(parents=True, exist_ok=True)
    for space in data["spaces"]:
        content = subprocess.run(["git", "-C", str(source), "show", f"{commit}:{space['path']}"], capture_output=True,
                                 check=False).stdout
        digest = hashlib.sha256(content).hexdigest()
        if digest != space["sha256"]:
            print(f"{space['name']}: {space['path']} at {commit[:12]} has sha256 {digest[:16]}..., the manifest "
                  f"{space['sha256'][:16]}...: not copied", file=sys.stderr)
            return 1
        (target / f"{space['name']}.json.gz").write_bytes(content)
    print(f"{len(data['spaces'])} spaces in {target}")
    return 0


@functools.cache
def _recorded(path: str):
    """A space, read once a worker process (a GEMM space takes 0.7 s to read; each runs 30 seeds or more)."""
    from evo.replay import kernel_tuner_space

    return kernel_tuner_space(path)


def strategy_options(label: str) -> tuple[str, dict]:
    """``name`` or ``name:knob=value:knob=value`` (values JSON where they parse, e.g. portfolio:tpe_share=0.25)
    -> (name, options); the label names the variant in the records."""
    name, *pairs = label.split(":")
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{label!r}: expected name:option=value, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return name, options


def _evo_run(task: tuple) -> dict:
    path, name, split, strategy, seed, budget = task
    from evo.replay import replay_once

    recorded = _recorded(path)
    chosen, options = strategy_options(strategy)
    told = replay_once(recorded, chosen, seed=seed, budget=budget, stop_within=WITHIN, options=options or None)
    hit = len(told) if told and recorded.within(told[-1], WITHIN) else None
    return dict(space=name, split=split, strategy=strategy, seed=seed, budget=budget, to_5pct=hit)


def _kernel_tuner_run(task: tuple) -> dict:
    path, name, split, strategy, seed, budget = task
    sys.path.insert(0, str(Path(__file__).parent))
    from kernel_tuner_replay import kernel_tuner_run, plain_cache

    with plain_cache(Path(path)) as (cache, best, plain):
        told = kernel_tuner_run(cache, plain, strategy.removeprefix(KERNEL_TUNER_PREFIX), seed, budget)
    hit = next((i + 1 for i, t in enumerate(told) if t is not None and t <= best * (1 + WITHIN)), None)
    return dict(space=name, split=split, strategy=strategy, seed=seed, budget=budget, to_5pct=hit)


def replay(args) -> int:
    spaces = [s for s in manifest()["spaces"] if args.split in ("all", s["split"])]
    done = set()
    out = Path(args.out)
    if out.exists():
        done = {(r["space"], r["strategy"], r["seed"]) for r in map(json.loads, out.read_text().splitlines())}
    tasks = []
    names = [s for s in args.strategies.split(",") if s] + [KERNEL_TUNER_PREFIX + s for s in args.kernel_tuner.split(",") if s]
    for strategy in names:
        for space in spaces:
            path = Path(args.spaces) / f"{space['name']}.json.gz"
            if not path.exists():
                print(f"{path} is missing: run `python benchmarks/tuning_spaces.py fetch --from CHECKOUT` first",
                      file=sys.stderr)
                return 2
            for seed in range(args.seeds):
                if (space["name"], strategy, seed) not in done:
                    tasks.append((str(path), space["name"], space["split"], strategy, seed, args.budget))
    with ProcessPoolExecutor(args.workers) as pool, out.open("a") as sink:
        runs = [pool.submit(_kernel_tuner_run if t[3].startswith(KERNEL_TUNER_PREFIX) else _evo_run, t) for t in tasks]
        for run in runs:
            sink.write(json.dumps(run.result()) + "\n")
            sink.flush()
    print(f"{len(tasks)} runs appended to {out}")
    return 0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.inf


def report(paths: list[str], reference: list[str]) -> str:
    """Markdown: per split, each space's figures per strategy, and each strategy's regret against the best
    reference strategy on that space (in share of runs within 5% after 100 evaluations)."""
    records = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines() if line.strip()]
    table: dict[tuple, list] = {}
    for r in records:
        table.setdefault((r["split"], r["space"], r["strategy"]), []).append(math.inf if r["to_5pct"] is None else r["to_5pct"])
    strategies = sorted({k[2] for k in table})
    lines = []
    for split in ("tuning", "held-out"):
        spaces = sorted({k[1] for k in table if k[0] == split})
        if not spaces:
            continue
        lines += [f"\n### {split} ({len(spaces)} spaces)\n",
                  "| space | " + " | ".join(strategies) + " |", "|---|" + "---|" * len(strategies)]
        quick: dict[str, list[float]] = {s: [] for s in strategies}
        regret: dict[str, list[float]] = {s: [] for s in strategies}
        medians_won: dict[str, int] = {s: 0 for s in strategies}
        oracle: list[float] = []  # per space, the best reference's share: what picking the right one each time gives
        for space in spaces:
            cells, shares, medians = [], {}, {}
            for strategy in strategies:
                runs = table.get((split, space, strategy))
                if not runs:
                    cells.append("-")
                    continue
                shares[strategy] = sum(n <= AT for n in runs) / len(runs)
                medians[strategy] = _median(runs)
                cells.append(f"{shares[strategy]:.0%} / {medians[strategy]:g} ({len(runs)})")
            best_reference = max((shares[s] for s in reference if s in shares), default=None)
            best_median = min((medians[s] for s in reference if s in medians), default=None)
            if best_reference is not None:
                oracle.append(best_reference)
            for strategy in shares:
                quick[strategy].append(shares[strategy])
                if best_reference is not None:
                    regret[strategy].append(best_reference - shares[strategy])
                if best_median is not None and medians[strategy] <= best_median:
                    medians_won[strategy] += 1
            lines.append(f"| {space} | " + " | ".join(cells) + " |")
        lines.append("| **mean within 5% at 100** | " + " | ".join(
            f"**{statistics.mean(quick[s]):.0%}**" if quick[s] else "-" for s in strategies) + " |")
        if reference:
            lines.append("| worst regret vs the best reference | " + " | ".join(
                f"{max(regret[s]):+.2f}" if regret[s] else "-" for s in strategies) + " |")
            lines.append("| median <= the best reference's | " + " | ".join(
                f"{medians_won[s]} of {len(quick[s])}" if quick[s] else "-" for s in strategies) + " |")
            if oracle:
                lines.append(f"\nthe best reference on each space, picked per space after the fact: "
                             f"**{statistics.mean(oracle):.0%}** within 5% at {AT} on average")
    header = (f"cells: share of runs within 5% of the best after {AT} evaluations / median evaluations to 5% "
              f"(inf: not within the budget) (runs); reference strategies: {', '.join(reference) or 'none'}")
    return header + "\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser("fetch", help="copy the spaces from a checkout of the source repository")
    get.add_argument("--from", dest="source", required=True, help="a git checkout or mirror of the manifest's repository")
    get.add_argument("--to", default=str(DEFAULT_DIR))
    run = commands.add_parser("replay", help="replay strategies on the spaces, appending one JSON line a run")
    run.add_argument("--spaces", default=str(DEFAULT_DIR))
    run.add_argument("--split", choices=("tuning", "held-out", "all"), default="all")
    run.add_argument("--strategies", default="surrogate,random", help="evo's strategies, comma-separated, each NAME or NAME:OPTION=VALUE:... (e.g. portfolio:tpe_share=0.25)")
    run.add_argument("--kernel-tuner", default="", help="Kernel Tuner's strategies, comma-separated (pip install kernel_tuner)")
    run.add_argument("--seeds", type=int, default=30)
    run.add_argument("--budget", type=int, default=400)
    run.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    run.add_argument("--out", required=True)
    show = commands.add_parser("report", help="the tables of recorded runs")
    show.add_argument("records", nargs="+")
    show.add_argument("--reference", default="", help="strategies to measure regret against (their best per space)")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        return fetch(Path(args.source), Path(args.to))
    if args.command == "replay":
        return replay(args)
    print(report(args.records, [s for s in args.reference.split(",") if s]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
