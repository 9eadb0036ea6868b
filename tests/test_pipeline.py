"""The pipeline through Ray: one record per genome, in order, whatever the candidate does."""

import os
import tempfile
from pathlib import Path

import pytest

from evo.fitness import BuildConfig, EvalConfig, Status
from evo.fitness.workers import Pipeline, PipelineConfig
from evo.seeds import get_family
from tests.conftest import FAULTY

pytestmark = pytest.mark.slow


def test_every_fault_becomes_a_record_and_the_pipeline_survives(ray_session, cache_dir):
    family = get_family(FAULTY)
    modes = ["ok", "segfault", "wrong", "hang", "nan", "compile_error", "nowrite"]
    genomes = [family.space.genome({"mode": m, "scale": 2, "pad": i % 4}) for i, m in enumerate(modes)]
    genomes.append(family.space.genome({"mode": "ok", "scale": 2, "pad": 3}))  # after the faults
    # The cap is far away: the hang is stopped by the watchdog derived from the anchor's pass (its floor here).
    config = PipelineConfig(BuildConfig(cache_dir), EvalConfig(trials=2), eval_timeout_s=600.0, watchdog_min_s=3.0)
    pipeline = Pipeline(family, config)
    try:
        results = pipeline.evaluate_all(genomes)
    finally:
        pipeline.close()
    assert [r.genome_id for r in results] == [g.id for g in genomes]
    statuses = [r.status for r in results]
    assert statuses == [Status.OK, Status.CRASHED, Status.INCORRECT, Status.TIMEOUT, Status.INCORRECT,
                        Status.COMPILE_ERROR, Status.INCORRECT, Status.OK]
    by_mode = dict(zip(modes, results))
    assert "evaluator process died running this kernel, twice" in by_mode["segfault"].message
    assert "evaluator killed" in by_mode["hang"].message
    assert "within the watchdog's 3 s (20 x the anchor's" in by_mode["hang"].message
    assert 3.0 <= by_mode["hang"].stages.verify < 60.0
    assert pipeline.hardware["watchdog"].startswith("3 s (20 x the anchor's")
    assert "NaN/Inf" in by_mode["nan"].message
    assert "deliberate compile error" in by_mode["compile_error"].message
    assert all(r.fitness_s is None for r in results[1:-1])
    assert results[0].fitness_s > 0 and results[-1].fitness_s > 0
    assert results[-1].anchor and results[-1].anchor[0].median_s > 0  # a fresh evaluator re-timed it


def test_a_killed_worker_is_retried_once_on_a_fresh_one_then_recorded(ray_session, cache_dir):
    import ray

    family = get_family(FAULTY)
    modes = ["evaluator_killed_once", "builder_killed_once", "builder_killed", "ok"]
    genomes = [family.space.genome({"mode": m, "scale": 2, "pad": 0}) for m in modes]
    pipeline = Pipeline(family, PipelineConfig(BuildConfig(cache_dir), EvalConfig(trials=2), eval_timeout_s=30.0))
    try:
        results = pipeline.evaluate_all(genomes)
    finally:
        pipeline.close()
    by_mode = dict(zip(modes, results))
    for mode in ("evaluator_killed_once", "builder_killed_once", "ok"):  # the retry gave a real result
        assert by_mode[mode].status is Status.OK, by_mode[mode].message
        assert by_mode[mode].fitness_s > 0
    assert by_mode["builder_killed"].status is Status.WORKER_LOST
    assert "build worker lost" in by_mode["builder_killed"].message
    assert by_mode["builder_killed"].fitness_s is None
    # the "once" workers really were killed: each left the marker it writes just before dying
    raylet = ray.get(ray.remote(lambda: os.environ["RAY_RAYLET_PID"]).remote())
    markers = Path(tempfile.gettempdir()) / f"evo-faulty-{raylet}"
    assert {genomes[0].id, genomes[1].id} <= {m.name for m in markers.iterdir()}


def test_cpu_gemm_batch_in_order(ray_session, cache_dir):
    family = get_family("cpu_gemm")
    seed = family.seed_genomes[0]
    faster = family.space.genome({**seed.as_dict(), "loop_order": "register", "vec_width": 16, "rows_per_step": 4,
                                  "threads": 2, "block_k": 128, "pack_b": True})
    pipeline = Pipeline(family, PipelineConfig(BuildConfig(cache_dir), EvalConfig(trials=1)))
    try:
        results = pipeline.evaluate_all([seed, faster])
        assert pipeline.hardware["device_kind"] == "cpu"
    finally:
        pipeline.close()
    assert [r.genome_id for r in results] == [seed.id, faster.id]  # one result per genome, in input order
    assert [r.status for r in results] == [Status.OK, Status.OK]
    assert all(r.fitness_s > 0 and r.anchor for r in results)
    # (how much the knobs matter is a timing: docs/BENCHMARKS.md, not a pass/fail test on a shared CI machine)
