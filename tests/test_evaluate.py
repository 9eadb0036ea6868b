import pytest

from evo.fitness import BuildConfig, Builder, EvalConfig, Evaluator, Status, screen
from evo.seeds import get_family
from tests.conftest import FAULTY


def evaluate(family, genome, tmp_path):
    recipe = family.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    screened = screen(build, recipe.output, family.screen_limits)
    return Evaluator(family, EvalConfig(trials=2), tmp_path / "loaded").evaluate(genome, build, screened)


def test_cpu_gemm_seed_verifies_and_is_timed_with_its_anchor(tmp_path):
    family = get_family("cpu_gemm")
    result = evaluate(family, family.seed_genomes[0], tmp_path)
    assert result.status is Status.OK, result.message
    assert [c.shape for c in result.checks] == [s.name for s in family.shapes]
    assert all(c.passed and c.trials == 2 and c.rel_l2_error < 1e-6 for c in result.checks)
    assert [t.shape for t in result.timings] == [s.name for s in family.shapes]
    assert [t.shape for t in result.anchor] == [s.name for s in family.shapes]
    mission = result.timing("mission")
    assert result.fitness_s == mission.median_s > 0
    assert mission.runs >= family.timing.min_runs and mission.p90_s >= mission.median_s
    assert result.stages.verify > 0 and result.stages.benchmark > 0


@pytest.mark.parametrize("cold", [False, True])
def test_cold_cache_timing_flushes_the_cache_before_every_timed_run(monkeypatch, tmp_path, cold):
    import evo.fitness.benchmark as benchmark
    from evo.seeds import TimingPlan

    calls = []
    monkeypatch.setattr(benchmark, "reading_flush", lambda device: lambda: calls.append("flush"))
    timing = benchmark.time_runs(lambda: calls.append("run"), "cpu", TimingPlan(2, 5, 5, 0.0), "s", cold=cold)
    assert timing.runs == 5
    measured = (["flush", "run"] if cold else ["run"]) * 5  # once, or twice where its samples spread wide
    assert calls in (["run"] * 2 + measured, (["run"] * 2 + measured) * 2)
    family = get_family("cpu_gemm")  # the evaluator times anchors (and kernels) the way its config says
    calls.clear()
    Evaluator(family, EvalConfig(trials=1, cold_cache=cold), tmp_path / "loaded").time_anchor(
        family.anchor, family.mission_shape)
    assert ("flush" in calls) == cold


@pytest.mark.parametrize("sizes, expected", [
    ({"index0": "48K", "index2": "2048K", "index3": "32768K"}, 32 << 20),
    ({"index0": "1M", "index3": "4194304"}, 4 << 20),  # sysfs may give bytes with no suffix
    ({"index0": "junk"}, 0),
    ({}, 0),
])
def test_the_flush_reads_twice_the_largest_cache_sysfs_reports(tmp_path, sizes, expected):
    from evo.runtime import flush as _flush

    for index, text in sizes.items():
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(text + "\n")
    assert _flush.host_cache_bytes(tmp_path) == expected
    assert _flush.flush_bytes("cpu") >= _flush.MIN_FLUSH_BYTES
    with pytest.raises(ValueError, match="device"):
        _flush.flush_bytes("tpu")


@pytest.mark.parametrize("mode, fragment", [
    ("wrong", "max abs error"),
    ("nan", "NaN/Inf"),
    ("nowrite", "never written"),
])
def test_wrong_outputs_are_incorrect_records(tmp_path, mode, fragment):
    family = get_family(FAULTY)
    genome = family.space.genome({"mode": mode, "scale": 2, "pad": 0})
    result = evaluate(family, genome, tmp_path)
    assert result.status is Status.INCORRECT
    assert fragment in result.message
    assert result.fitness_s is None and result.timings == ()


def test_compile_error_reaches_the_evaluator_as_a_record(tmp_path):
    family = get_family(FAULTY)
    genome = family.space.genome({"mode": "compile_error", "scale": 2, "pad": 0})
    result = evaluate(family, genome, tmp_path)
    assert result.status is Status.COMPILE_ERROR and "deliberate compile error" in result.message


def gate(family, genome, tmp_path, target_s, rounds=10):
    recipe = family.build_recipe(genome)
    build = Builder(BuildConfig(tmp_path / "cache")).build(genome.id, recipe)
    evaluator = Evaluator(family, EvalConfig(trials=1), tmp_path / "loaded")
    first = evaluator.evaluate(genome, build, screen(build, recipe.output, family.screen_limits))
    return first, evaluator.gate(genome, build, [(family.mission_shape.name, target_s)], rounds)


def test_the_hard_gate_passes_a_steady_correct_kernel_ten_times(tmp_path):
    family = get_family(FAULTY)  # a kernel that waits 200 us: its rounds agree however busy the machine
    first, result = gate(family, family.space.genome({"mode": "steady", "scale": 2, "pad": 0}), tmp_path, 1.0)
    assert first.status is Status.OK
    assert result.passed and result.message == ""
    assert len(result.rounds) == 10 and all(r.verified and 0 < r.mission_s <= 1.0 for r in result.rounds)


def test_the_hard_gate_fails_a_kernel_that_goes_wrong_after_its_evaluation(tmp_path):
    family = get_family(FAULTY)
    first, result = gate(family, family.space.genome({"mode": "flaky", "scale": 2, "pad": 0}), tmp_path, 1.0)
    assert first.status is Status.OK  # it was right when the search evaluated it
    assert not result.passed and not result.rounds[-1].verified
    assert "max abs error" in result.message and result.message.startswith(f"round {len(result.rounds)}:")


def test_the_hard_gate_fails_a_kernel_slower_than_the_target(tmp_path):
    family = get_family(FAULTY)
    first, result = gate(family, family.seed_genomes[0], tmp_path, target_s=1e-12)
    assert first.status is Status.OK
    assert not result.passed and len(result.rounds) == 1 and result.rounds[0].verified
    assert "over the target" in result.message


def test_the_watchdog_is_a_multiple_of_the_anchor_pass_between_a_floor_and_the_cap(tmp_path):
    from evo.fitness.workers import PipelineConfig

    config = PipelineConfig(BuildConfig(tmp_path), eval_timeout_s=300.0, watchdog_factor=20.0, watchdog_min_s=5.0)
    assert config.watchdog_s(0.01) == 5.0  # a quick anchor: the floor
    assert config.watchdog_s(1.5) == 30.0  # 20 x the anchor's pass
    assert config.watchdog_s(60.0) == 300.0  # never above the cap
    assert "20 x the anchor's 1.5 s pass" in config.describe_watchdog(1.5)
    for bad in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="watchdog_factor"):
            PipelineConfig(BuildConfig(tmp_path), watchdog_factor=bad)


def test_the_evaluator_measures_its_anchor_pass(tmp_path):
    family = get_family(FAULTY)
    evaluator = Evaluator(family, EvalConfig(trials=1), tmp_path / "loaded")
    assert evaluator.anchor_pass_s is None
    evaluator.anchor_timings()
    assert 0 < evaluator.anchor_pass_s < 60


def test_a_kernel_verified_only_where_it_runs_and_screened_out_where_it_cannot_run_the_mission(tmp_path):
    """A family's takes(): a shape a genome's kernel cannot run (a dtype only another design takes) is left
    out of its checks and timings; when that shape is the mission, the genome is screened out."""
    import copy

    family = copy.copy(get_family("cpu_gemm"))
    seed = family.seed_genomes[0]
    family.takes = lambda genome, shape: shape.name != "ragged"
    result = evaluate(family, seed, tmp_path)
    assert result.status is Status.OK and [c.shape for c in result.checks] == ["mission", "tall"]
    family.takes = lambda genome, shape: not shape.mission
    result = evaluate(family, seed, tmp_path / "again")
    assert result.status is Status.SCREENED_OUT and "cannot run the mission shape mission" in result.message


def test_the_anchor_is_timed_again_once_its_timing_is_older_than_the_refresh(monkeypatch, tmp_path):
    """A workload evaluator timed cuDNN 10% slow as it started and kept that figure for the whole search; the
    anchor is now re-timed every ANCHOR_REFRESH_S, and the watchdog keeps the first pass's time."""
    import evo.fitness.evaluate as evaluate_module

    family = get_family("cpu_gemm")
    evaluator = Evaluator(family, EvalConfig(trials=1), tmp_path / "loaded")
    timed = []
    monkeypatch.setattr(evaluator, "time_anchor", lambda run, shape: timed.append(shape.name) or f"timing {len(timed)}")
    first = evaluator.anchor_timings()
    assert evaluator.anchor_timings() is first and len(timed) == len(family.shapes)  # fresh: not timed again
    pass_s = evaluator.anchor_pass_s
    monkeypatch.setattr(evaluate_module, "ANCHOR_REFRESH_S", 0.0)
    again = evaluator.anchor_timings()
    assert again != first and len(timed) == 2 * len(family.shapes) and evaluator.anchor_pass_s == pass_s
