"""Replay: strategies run against recorded measurements (Kernel Tuner cache files, evo runs), on the CPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evo.cli import main
from evo.replay import kernel_tuner_space, replay_once, store_space, summarize

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "replay_caches"


def tiny_cache(path: Path) -> Path:
    """A Kernel Tuner cache of a 4 x 3 space: one configuration failed, one never measured (restricted)."""
    cache = {}
    for x in (1, 2, 4, 8):
        for y in (16, 32, 64):
            if (x, y) == (8, 64):
                continue  # absent: invalid
            time = "CompilationFailedConfig" if (x, y) == (1, 16) else 10.0 + abs(x - 4) + abs(y - 32) / 16
            cache[f"{x},{y}"] = {"block_x": x, "tile-y": y, "time": time}
    data = {"tune_params_keys": ["block_x", "tile-y"], "tune_params": {"block_x": [1, 2, 4, 8], "tile-y": [16, 32, 64]},
            "cache": cache, "objective": "time"}
    with gzip.open(path, "wt") as handle:
        json.dump(data, handle)
    return path


def test_a_kernel_tuner_cache_is_a_recorded_space(tmp_path):
    recorded = kernel_tuner_space(tiny_cache(tmp_path / "tiny.json.gz"))
    assert recorded.space.names == ("block_x", "tile_y") and len(recorded.times) == 11 and recorded.best_s == 10.0
    assert sum(t is None for t in recorded.times.values()) == 1  # the failed one


def test_absent_configurations_are_invalid_and_every_strategy_finds_the_best_of_a_tiny_space(tmp_path):
    recorded = kernel_tuner_space(tiny_cache(tmp_path / "tiny.json.gz"))
    with pytest.raises(ValueError, match="not one of the space.s listed members"):
        recorded.space.check(recorded.space.genome({"block_x": 8, "tile_y": 64}))
    for strategy in ("surrogate", "evolution", "random", "optuna"):
        for mode in ("loop", "sync"):
            told = replay_once(recorded, strategy, seed=3, budget=11, population=4, mode=mode)
            assert len(told) == 11 and 10.0 in told and None in told, (strategy, mode)  # the whole space, once
    again = replay_once(recorded, "evolution", seed=3, budget=8, population=4)
    assert again == replay_once(recorded, "evolution", seed=3, budget=8, population=4)  # a seed decides a run


def test_the_summary_counts_evaluations_to_the_best_and_successes_by_budget(tmp_path):
    recorded = kernel_tuner_space(tiny_cache(tmp_path / "tiny.json.gz"))
    summary = summarize(recorded, "random", seeds=range(6), budget=11, population=4, budgets=(5, 11))
    assert summary.runs == 6 and summary.success_5pct[11] == 1.0 and 1 <= summary.to_1pct[1] <= 11
    assert 0.0 <= summary.success_5pct[5] <= 1.0


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared replay caches are not beside this checkout")
def test_the_shared_public_spaces_load():
    for name in ("gemm_RTX3090", "convolution_RTX3090", "dedispersion_W7800"):
        recorded = kernel_tuner_space(SHARED / f"{name}.json.gz")
        assert len(recorded.times) > 5000 and recorded.best_s > 0


def test_evo_replay_prints_the_table_and_refuses_bad_input(tmp_path, capsys):
    cache = tiny_cache(tmp_path / "tiny.json.gz")
    assert main(["replay", str(cache), "--seeds", "3", "--budget", "11", "--population", "4",
                 "--strategies", "evolution,random"]) == 0
    out = capsys.readouterr().out
    assert "replay on tiny: 11 recorded configurations" in out and "evolution" in out and "random" in out
    for args, message in [(["replay"], "a Kernel Tuner cache file or --run N"),
                          (["replay", str(cache), "--strategies", "annealing"], "unknown ['annealing']"),
                          (["replay", str(cache), "--mode", "eager"], "--mode 'eager'"),
                          (["replay", str(tmp_path / "none.json")], "not a Kernel Tuner cache file")]:
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_an_evo_run_is_a_recorded_space(tmp_path, capsys):
    from evo.db import Database, NewIndividual, Store, resolve_url
    from evo.fitness import EvalResult, Status
    from evo.seeds import get_family

    family = get_family("cpu_gemm")
    store = Store(Database(resolve_url(str(tmp_path / "evo.db"))).open())
    run = store.create_run(family="cpu_gemm", strategy="evolution", target=None, seed=0, config={})
    genomes = [family.seed_genomes[0], family.seed_genomes[0].replace(block_m=64),
               family.seed_genomes[0].replace(block_m=128)]
    ids = store.add_individuals(run, [NewIndividual(g.id, g.as_dict(), 0, "seed") for g in genomes])
    for genome, (status, seconds) in zip(genomes, [(Status.OK, 2e-3), (Status.OK, 1e-3), (Status.INCORRECT, None)]):
        store.record_evaluation(ids[genome.id], EvalResult(genome.id, status, "", seconds))
    recorded = store_space(store, run, family)
    assert recorded.best_s == 1e-3 and len(recorded.times) == 3
    told = replay_once(recorded, "random", seed=0, budget=3, population=2)
    assert sorted(t for t in told if t is not None) == [1e-3, 2e-3]
    assert main(["replay", "--run", "1", "--db", str(tmp_path / "evo.db"), "--seeds", "2", "--budget", "3",
                 "--strategies", "random"]) == 0
    assert "replay on run 1 (cpu_gemm): 3 recorded configurations, best 1 ms" in capsys.readouterr().out


def test_a_run_may_end_at_its_first_time_within_a_fraction_of_the_best(tmp_path):
    """stop_within: what a search with that target does; the evaluations it needed are the list's length."""
    recorded = kernel_tuner_space(tiny_cache(tmp_path / "tiny.json.gz"))
    whole = replay_once(recorded, "random", seed=5, budget=11, population=4)
    stopped = replay_once(recorded, "random", seed=5, budget=11, population=4, stop_within=0.05)
    first = next(i + 1 for i, t in enumerate(whole) if recorded.within(t, 0.05))
    assert stopped == whole[:first] and recorded.within(stopped[-1], 0.05)


def test_the_corpus_report_sets_each_strategy_against_the_best_reference_per_space(tmp_path):
    """benchmarks/tuning_spaces.py report (run as a user runs it): per split, share within 5% after 100
    evaluations and median evaluations, the worst regret against the best reference strategy, and how many
    spaces a strategy's median is at or below the best reference's."""
    import subprocess
    import sys

    records = [dict(space="a", split="held-out", strategy="mine", seed=s, budget=400, to_5pct=n)
               for s, n in enumerate([50, 60, 150, None])]
    records += [dict(space="a", split="held-out", strategy="kt:ga", seed=s, budget=400, to_5pct=n)
                for s, n in enumerate([40, 90, 95, 120])]
    records += [dict(space="b", split="tuning", strategy="mine", seed=0, budget=400, to_5pct=10)]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "tuning_spaces.py"
    done = subprocess.run([sys.executable, str(script), "report", str(path), "--reference", "kt:ga"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| a | 75% / 92.5 (4) | 50% / 105 (4) |" in out  # kt:ga first: columns sorted by name
    assert "| worst regret vs the best reference | +0.00 | +0.25 |" in out
    assert "| median <= the best reference's | 1 of 1 | 0 of 1 |" in out
    assert "### tuning (1 spaces)" in out and "| b | - | 100% / 10 (1) |" in out
