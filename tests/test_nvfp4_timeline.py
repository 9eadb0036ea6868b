"""benchmarks/nvfp4_timeline.py: its stamp points and work-removing bounds still match the kernel
source they patch, and the stamped source builds (CPU; nvcc)."""

import re
import sys
from pathlib import Path

import pytest

from evo.fitness import BuildConfig, Builder, Status

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import nvfp4_timeline as timeline  # noqa: E402
from evo.seeds.nvfp4_gemm.designs import CLUSTER, CLUSTER_L2, FAMILY, K_SPLIT, PRODUCER  # noqa: E402


def stamps(text: str) -> list[str]:
    return sorted(set(re.findall(r"STAMP\((\d)\);", text)))


def test_every_bound_finds_its_text_in_the_mbarrier_stage_loop():
    plain = FAMILY.build_recipe(K_SPLIT).source
    for bound in timeline.BOUNDS:
        assert timeline.recipe(FAMILY, K_SPLIT, [bound], stamped=False).source != "#define STAMP(i)\n" + plain, bound


def test_stamps_land_at_every_point_of_both_cluster_sums():  # (the text holds every path; macros pick)
    for genome in (CLUSTER, CLUSTER_L2):
        assert stamps(timeline.recipe(FAMILY, genome, [], stamped=True).source) == list("01234567")


def test_a_producer_warpgroup_stamps_its_first_tile_and_its_end():  # (points missing from the text are skipped)
    text = timeline.recipe(FAMILY, PRODUCER, [], stamped=True).source
    assert "barrier_arrive(tma.full_in(s));\nif (kt == begin) STAMP(2);" in text
    assert "begin, end);\nSTAMP(3);\n        return;" in text


def test_a_bound_whose_text_is_gone_stops_the_tool():
    timeline.BOUNDS["vanished"] = (("text no kernel has", ""),)
    try:
        with pytest.raises(SystemExit, match="vanished"):
            timeline.recipe(FAMILY, K_SPLIT, ["vanished"], stamped=False)
    finally:
        del timeline.BOUNDS["vanished"]


@pytest.mark.nvcc
def test_the_stamped_source_with_bounds_builds(tmp_path):
    build = Builder(BuildConfig(tmp_path)).build(
        CLUSTER_L2.id, timeline.recipe(FAMILY, CLUSTER_L2, ["no_a_boxes", "no_dequant"], stamped=True))
    assert build.status is Status.OK, build.message
    assert build.artifact
