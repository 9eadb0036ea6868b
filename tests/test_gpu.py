"""The GPU path: nvcc cubins, ptxas screen, cuda.bindings launches on torch tensors, CUDA-event
timing, and isolation of kernels that fault or never finish. Needs nvcc (and a GPU to run)."""

import sqlite3

import pytest

from evo.fitness import BuildConfig, Builder, EvalConfig, Status, screen
from evo.fitness.workers import Pipeline, PipelineConfig
from evo.seeds import get_family

CUDA_AXPY = "tests.families.cuda_axpy:FAMILY"


@pytest.mark.nvcc
def test_every_cuda_axpy_variant_compiles_and_passes_the_screen(cache_dir):
    family = get_family(CUDA_AXPY)
    builder = Builder(BuildConfig(cache_dir))
    for genome in family.space.enumerate():
        recipe = family.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, family.screen_limits)
        assert result.status is Status.OK, result.message
        assert 0 < result.usage.registers <= 255


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_faults_become_records_and_healthy_kernels_still_run(ray_session, cache_dir):
    family = get_family(CUDA_AXPY)
    modes = ["ok", "wrong", "nan", "nowrite", "illegal_address", "hang", "ok"]
    genomes = [family.space.genome({"mode": m, "threads": [64, 128, 256, 512][i % 4], "per_thread": 1 + (i == 6)})
               for i, m in enumerate(modes)]
    pipeline = Pipeline(family, PipelineConfig(BuildConfig(cache_dir), EvalConfig(trials=2), eval_timeout_s=8.0))
    try:
        results = pipeline.evaluate_all(genomes)
        hardware = pipeline.hardware
    finally:
        pipeline.close()
    print("\n".join(f"{m:16} {r.status.value:10} {r.fitness_s} {r.message[:120]}" for m, r in zip(modes, results)))
    assert [r.status for r in results] == [Status.OK, Status.INCORRECT, Status.INCORRECT, Status.INCORRECT,
                                           Status.CRASHED, Status.TIMEOUT, Status.OK]
    assert hardware["device_kind"] == "cuda" and hardware["device"]
    for ok in (results[0], results[-1]):
        mission = ok.timing("mission")
        assert 0 < mission.median_s < 1e-3 and mission.runs >= family.timing.min_runs
        assert ok.anchor_timing("mission").median_s > 0
        assert ok.usage.registers > 0
    assert "never written" in results[3].message


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_search_end_to_end(ray_session, tmp_path, capsys):
    from evo.cli import main

    experiment = tmp_path / "gpu.toml"
    experiment.write_text(f'[search]\nfamily = "{CUDA_AXPY}"\nbudget = 12\npopulation = 6\neval_timeout = "8s"\n'
                          'trials = 2\n')
    db = tmp_path / "evo.db"
    code = main(["search", "--experiment", str(experiment), "--db", str(db)])
    assert code == 0
    with sqlite3.connect(db) as connection:
        statuses = dict(connection.execute("SELECT status, COUNT(*) FROM evaluations GROUP BY status").fetchall())
        hardware = connection.execute("SELECT hardware FROM runs").fetchone()[0]
    print(statuses, hardware)
    assert sum(statuses.values()) == 12 and statuses.get("ok", 0) >= 1
    assert main(["show", "1", "--db", str(db)]) == 0


@pytest.mark.gpu
def test_cold_cache_timing_on_the_gpu():
    """--cold-cache on CUDA: one launch per sample between events, after the L2 is flushed."""
    import torch

    from evo.fitness.benchmark import time_runs
    from evo.seeds import TimingPlan

    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    timing = time_runs(lambda: y.copy_(x), "cuda", TimingPlan(2, 30, 30, 0.0), "copy", cold=True)
    assert timing.runs == 30 and 0 < timing.median_s < 1e-3
    assert torch.equal(y, x)


@pytest.mark.gpu
def test_a_host_gap_inside_a_sample_is_not_timed():
    """Samples queued behind a spin kernel: a host that sleeps 2 ms before each launch between the events
    still times the copy alone (the batch is queued again behind a longer spin until the spin covers it)."""
    import time

    import torch

    from evo.runtime.queued import SpinQueue

    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)

    def slow_host() -> None:
        time.sleep(2e-3)
        y.copy_(x)

    queue = SpinQueue()
    times = queue.batch([(None, slow_host)] * 3)
    assert queue.requeued >= 1 and queue.uncovered == 0
    assert max(times) < 0.5e-3, times
    assert torch.equal(y, x)
