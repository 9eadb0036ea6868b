"""Memory across runs: a measurement is found again by what it depends on, a later run reuses it instead
of building and timing again (counted and shown as reused), --no-reuse measures everything, and
--warm-start begins from the best genomes earlier runs found."""

from __future__ import annotations

import dataclasses

import pytest

import evo
from evo.db import Database, Memory, Store, resolve_url
from evo.fitness import EvalConfig, measurement_key
from evo.seeds import get_family

HARDWARE = {"device_kind": "cuda", "device": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "cuda": "13.0",
            "torch": "2.11.0", "host": "gpu-1"}


def test_the_key_changes_with_everything_a_measurement_depends_on_and_nothing_else():
    family = get_family("cpu_gemm")
    genome = family.seed_genomes[0]
    other = genome.replace(block_m=64 if genome["block_m"] != 64 else 32)
    mission = family.mission_shape.name
    key = measurement_key(family, genome, EvalConfig(), HARDWARE, mission)
    assert key == measurement_key(family, genome, EvalConfig(), {**HARDWARE, "host": "gpu-2"}, mission)  # same model
    changed = [
        measurement_key(family, other, EvalConfig(), HARDWARE, mission),
        measurement_key(family, genome, EvalConfig(trials=5), HARDWARE, mission),
        measurement_key(family, genome, EvalConfig(cold_cache=True), HARDWARE, mission),
        measurement_key(family, genome, EvalConfig(), {**HARDWARE, "device": "NVIDIA H200"}, mission),
        measurement_key(family, genome, EvalConfig(), {**HARDWARE, "driver": "575.0"}, mission),
        measurement_key(family, genome, EvalConfig(), {**HARDWARE, "torch": "2.13.0"}, mission),
        measurement_key(family, genome, EvalConfig(), HARDWARE, "tall"),
    ]
    assert len({key, *changed}) == len(changed) + 1


def test_the_key_changes_with_any_file_of_the_family_and_not_with_another_familys(tmp_path, monkeypatch):
    """A reference, a tolerance or a kernel edited in the family's folder stops reuse (earlier verdicts were
    checked against the old code); an edit to another family's folder does not."""
    from evo.cli import main

    folders = {}
    for name in ("mine", "other"):
        monkeypatch.chdir(tmp_path)
        assert main(["new-family", name, "--device", "cpu"]) == 0
        folders[name] = tmp_path / name
    family = get_family(str(folders["mine"]))
    genome = family.seed_genomes[0]

    def key():
        return measurement_key(family, genome, EvalConfig(), HARDWARE, family.mission_shape.name)

    before = key()
    spec = folders["other"] / "spec.py"
    spec.write_text(spec.read_text().replace('reference="2 * x + y"', 'reference="2 * x + y + 0"'))
    assert key() == before  # another family's edit
    keys = {before}
    for file, old, new in (("spec.py", 'reference="2 * x + y"', 'reference="y + 2 * x"'),
                           ("spec.py", 'name="mine",', 'name="mine", tolerance=None,'),
                           ("mine.cpp", "2.0f * x[i]", "x[i] * 2.0f")):
        path = folders["mine"] / file
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
        keys.add(key())
    assert len(keys) == 4  # each edit a new key


def _evaluations(db):
    store = Store(Database(resolve_url(str(db))).open(create=False))
    with store.database.session() as s:
        from sqlalchemy import select

        from evo.db.models import Evaluation, Individual
        return [(i.run_id, i.genome_id, i.origin, e.status, e.fitness_s, e.reused_from, e.measurement_key, e.message)
                for e, i in s.execute(select(Evaluation, Individual).join(Individual).order_by(Evaluation.id)).all()]


@pytest.mark.slow
def test_a_second_run_reuses_the_first_runs_measurements_and_no_reuse_measures_again(ray_session, tmp_path):
    db = tmp_path / "evo.db"
    first = evo.tune("cpu_gemm", budget=6, population=4, trials=1, db=db)
    assert first.reused == 0 and first.evaluated_now == 6
    second = evo.tune("cpu_gemm", budget=6, population=4, trials=1, db=db)  # the same seed: the same first batch
    assert second.reused >= 4 and second.evaluated_now == 6 - second.reused
    rows = _evaluations(db)
    firsts = {row[1]: row for row in rows if row[0] == first.run_id}
    copies = [row for row in rows if row[0] == second.run_id and row[5] is not None]
    assert len(copies) == second.reused
    for run, genome, _, status, fitness, reused_from, key, message in copies:
        original = firsts[genome]
        assert (status, fitness, key) == (original[3], original[4], original[6])
        assert message.startswith(f"measurement reused from run {first.run_id}")
    assert all(row[6] for row in rows)  # every measurement keeps its key
    third = evo.tune("cpu_gemm", budget=6, population=4, trials=1, reuse=False, db=db)
    assert third.reused == 0 and third.evaluated_now == 6
    fourth = evo.tune("cpu_gemm", budget=6, population=4, trials=2, db=db)  # another timing: nothing matches
    assert fourth.reused == 0


@pytest.mark.slow
def test_warm_start_begins_from_the_best_genomes_of_earlier_runs(ray_session, tmp_path):
    db = tmp_path / "evo.db"
    first = evo.tune("cpu_gemm", budget=8, population=4, trials=1, db=db)
    best = Memory(Store(Database(resolve_url(str(db))).open(create=False))).best_genomes("cpu_gemm", 4)
    assert best[0] == first.best_genome.as_dict()
    warm = evo.tune("cpu_gemm", budget=8, population=4, trials=1, seed=7, warm_start=True, db=db)
    rows = [r for r in _evaluations(db) if r[0] == warm.run_id]
    started = {r[1] for r in rows if r[2] == "warm_start"}
    assert first.best_genome.id in started and all(r[5] is not None for r in rows if r[2] == "warm_start")
    assert warm.best_fitness_s <= first.best_fitness_s


def test_the_flags_reach_the_search_and_bad_values_are_refused(tmp_path, capsys):
    from evo.cli import main

    with pytest.raises(ValueError, match="reuse must be true or false"):
        evo.new_search("cpu_gemm", budget=4, reuse="yes", db=tmp_path / "evo.db")
    experiment = tmp_path / "e.toml"
    experiment.write_text('[search]\nfamily = "cpu_gemm"\nreuse = "no"\n')
    assert main(["search", "--experiment", str(experiment), "--db", str(tmp_path / "x.db")]) == 2
    assert "reuse" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()
    from evo._config import SearchConfig
    assert dataclasses.asdict(SearchConfig("cpu_gemm"))["reuse"] is True
