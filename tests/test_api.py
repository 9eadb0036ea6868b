"""evo as a library: a search started, resumed and exported from Python, as from a notebook."""

from __future__ import annotations

import pytest

import evo


@pytest.mark.slow  # a whole search
def test_search_resume_and_export_from_python(ray_session, tmp_path):
    db = tmp_path / "evo.db"
    first = evo.tune("cpu_gemm", budget=6, population=4, trials=1, db=db)
    assert first.run_id == 1 and first.status == "budget_exhausted" and first.evaluations == 6
    assert first.best_genome is not None and first.best_fitness_s > 0 and first.anchor_s > 0
    more = evo.resume(first.run_id, budget=9, db=db)
    assert more.run_id == 1 and more.evaluations == 9
    exported = evo.export_run(1, tmp_path / "op", db=db)
    assert (tmp_path / "op" / "selfcheck.py").exists() and exported.genome_id == more.best_genome.id
    with pytest.raises(ValueError, match="already has 9 evaluations"):
        evo.resume(1, budget=9, db=db)


@pytest.mark.parametrize("arguments, message", [
    (dict(budget=0), "budget must be a positive number"),
    (dict(budget=4, populaton=8), "unknown search setting(s) ['populaton']"),
    (dict(budget=4, time_budget="soon"), "time_budget"),
    (dict(budget=4, workload="nosuch"), "nosuch"),
])
def test_a_bad_argument_is_a_value_error_naming_it_and_nothing_is_written(arguments, message, tmp_path):
    with pytest.raises(ValueError) as error:
        evo.new_search("cpu_gemm", db=tmp_path / "evo.db", **arguments)
    assert message in str(error.value)
    assert not (tmp_path / "evo.db").exists()


def test_a_family_object_is_taken_when_its_workers_can_load_it(tmp_path):
    from evo.seeds import get_family
    from tests.families.faulty import FaultyFamily

    loaded = get_family("tests.families.faulty:FAMILY")
    assert evo.new_search(loaded, budget=2, db=tmp_path / "evo.db").family is loaded
    with pytest.raises(ValueError, match="was made here, not loaded"):
        evo.new_search(FaultyFamily(), budget=2, db=tmp_path / "other.db")


def test_a_search_that_names_no_strategy_takes_its_familys(tmp_path):
    """The built-in families keep the surrogate their searches were measured with; a kernel of the user's own takes
    the portfolio, chosen on public tuning spaces and proven on held-out ones; a named strategy wins."""
    assert evo.new_search("cpu_gemm", budget=2, db=tmp_path / "a.db").config.strategy == "surrogate"
    assert evo.new_search("tests.families.faulty:FAMILY", budget=2, db=tmp_path / "b.db").config.strategy == "portfolio"
    named = evo.new_search("tests.families.faulty:FAMILY", budget=2, strategy="random", db=tmp_path / "c.db")
    assert named.config.strategy == "random" and named.strategy.name == "random"


def test_the_library_names_stay_functions_beside_the_modules_of_the_same_package():
    import evo.export  # noqa: F401  (the modules of the loop and of the export)
    import evo.search  # noqa: F401

    assert all(callable(getattr(evo, name)) for name in evo.__all__)


@pytest.mark.slow  # a whole search
def test_a_genome_that_cannot_run_the_fitness_shape_is_never_proposed_and_a_seed_that_cannot_is_screened_out_unbuilt(
        ray_session, tmp_path, monkeypatch):
    """A kernel that cannot take the shape its fitness is timed at (flashcore's classic design at a bf16
    workload: 828 of a search's 1,137 genomes were built and verified first) is outside the run's space: the
    strategy never proposes one, and a seed that is one is screened out by the loop itself, never built."""
    from evo.seeds import get_family

    family = get_family("cpu_gemm")
    assert family.seed_genomes[0]["pack_b"] is False
    monkeypatch.setattr(family, "takes", lambda genome, shape: genome["pack_b"] is True)
    outcome = evo.tune("cpu_gemm", budget=12, population=6, trials=1, db=tmp_path / "evo.db")
    rows = evo.api.open_store(evo.api.database_at(tmp_path / "evo.db", must_exist=True)).evaluations(outcome.run_id)
    seeds = [r for r in rows if r.origin == "seed"]
    assert [r.status for r in seeds] == ["screened_out"] and "the shape its fitness is timed at" in seeds[0].message
    proposed = [r for r in rows if r.origin != "seed"]
    assert len(proposed) == 11 and all(r.genome["pack_b"] for r in proposed)
    assert any(r.status == "ok" for r in proposed)
