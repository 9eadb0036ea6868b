import json
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evo.kernel_genome as kg
from evo.kernel_genome import Boolean, Choice, Constraint, Genome, IntRange, PowerOfTwo, Space

SPACE = Space(
    [
        PowerOfTwo("block_m", 16, 256),
        PowerOfTwo("block_n", 16, 256),
        IntRange("stages", 1, 4),
        Choice("mma", ("fma", "wmma", "mma_sync")),
        Boolean("swizzle"),
    ],
    [
        Constraint("smem", lambda g: g["block_m"] * g["block_n"] * 4 * g["stages"] <= 65536,
                   "block_m * block_n * 4 * stages <= 65536"),
        Constraint("swizzle_needs_mma", lambda g: not g["swizzle"] or g["mma"] != "fma", "swizzle needs mma"),
    ],
)
VALID = dict(block_m=64, block_n=64, stages=2, mma="wmma", swizzle=True)


def test_knob_domains_and_neighbours():
    assert PowerOfTwo("x", 8, 64).values == (8, 16, 32, 64)
    assert IntRange("s", 2, 8, 2).values == (2, 4, 6, 8)
    assert PowerOfTwo("x", 8, 64).neighbours(8) == (16,)
    assert PowerOfTwo("x", 8, 64).neighbours(16) == (8, 32)
    assert set(Choice("c", ("a", "b", "c")).neighbours("a")) == {"b", "c"}
    assert Choice("c", (1, 2, 4), ordered=True).neighbours(2) == (1, 4)
    assert Boolean("b").neighbours(True) == (False,)
    with pytest.raises(ValueError, match="power of two"):
        PowerOfTwo("x", 3, 64)


def test_bool_and_int_are_distinct_values():
    with pytest.raises(ValueError, match="'swizzle'"):
        SPACE.genome({**VALID, "swizzle": 1})
    with pytest.raises(ValueError, match="'stages'"):
        SPACE.genome({**VALID, "stages": True})


def test_unknown_knob_and_out_of_domain_are_value_errors_naming_them():
    with pytest.raises(ValueError, match="unknown knob 'warps'"):
        SPACE.genome({**VALID, "warps": 4})
    with pytest.raises(ValueError, match="knob 'block_m': value 48"):
        SPACE.genome({**VALID, "block_m": 48})
    with pytest.raises(ValueError, match="missing knob"):
        SPACE.genome({"block_m": 64})
    with pytest.raises(ValueError, match="malformed"):
        SPACE.genome_from_json("{not json")


def test_a_knob_added_later_reads_as_its_off_value_in_older_genomes():
    grown = Space(list(SPACE.knobs) + [IntRange("splits", 1, 4)], SPACE.constraints, added_later={"splits": 1})
    old = grown.genome(VALID)  # stored before the knob existed
    assert old["splits"] == 1 and grown.genome({**VALID, "splits": 3})["splits"] == 3
    with pytest.raises(ValueError, match="missing knob"):
        grown.genome({k: v for k, v in VALID.items() if k != "stages"})  # only knobs added later
    with pytest.raises(ValueError, match="knob 'splits': value 9"):
        Space(grown.knobs, added_later={"splits": 9})
    with pytest.raises(ValueError, match="unknown knob 'warps'"):
        Space(grown.knobs, added_later={"warps": 1})


def test_constraints_name_the_violation():
    genome = SPACE.genome({**VALID, "block_m": 256, "block_n": 256, "stages": 4})
    assert not SPACE.is_valid(genome)
    with pytest.raises(ValueError, match="constraint 'smem' violated: block_m \\* block_n"):
        SPACE.check(genome)
    assert SPACE.check(SPACE.genome(VALID))


def test_genome_id_is_canonical():
    a = SPACE.genome(VALID)
    b = SPACE.genome(dict(reversed(list(VALID.items()))))
    assert a == b and a.id == b.id and len(a.id) == 16
    assert SPACE.genome({**VALID, "stages": 3}).id != a.id
    assert Genome.from_mapping(json.loads(a.to_json())).id == a.id


def test_genome_id_is_stable_across_processes():
    code = ("from kernel_genome import Genome; "
            f"print(Genome.from_mapping({VALID!r}).id)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.strip()
    assert other == SPACE.genome(VALID).id


seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=60, deadline=None)
@given(seeds)
def test_sample_is_always_valid(seed):
    assert SPACE.is_valid(kg.sample(SPACE, random.Random(seed)))


@settings(max_examples=60, deadline=None)
@given(seeds, st.integers(1, 5))
def test_mutation_is_valid_and_moves_knobs(seed, strength):
    rng = random.Random(seed)
    parent = kg.sample(SPACE, rng)
    child = kg.mutate(SPACE, parent, rng, strength=strength)
    assert SPACE.is_valid(child.genome)
    assert child.parents == (parent,)
    assert child.operators[0] == "mutation"
    if child.operators == ("mutation",):
        assert 1 <= len(child.changed_knobs(parent)) <= strength
    else:
        assert child.operators == ("mutation", "repair")


@settings(max_examples=60, deadline=None)
@given(seeds)
def test_crossover_takes_every_knob_from_a_parent(seed):
    rng = random.Random(seed)
    a, b = kg.sample(SPACE, rng), kg.sample(SPACE, rng)
    child = kg.crossover(SPACE, a, b, rng)
    assert SPACE.is_valid(child.genome)
    if child.operators == ("crossover",):
        for name in SPACE.names:
            assert child.genome[name] in (a[name], b[name])


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({k.name: st.sampled_from(k.values) for k in SPACE.knobs}), seeds)
def test_repair_returns_a_valid_genome_and_keeps_valid_ones(values, seed):
    genome = SPACE.genome(values)
    repaired = kg.repair(SPACE, genome, random.Random(seed))
    assert repaired is not None and SPACE.is_valid(repaired)
    if SPACE.is_valid(genome):
        assert repaired == genome


def test_repair_moves_to_the_nearest_valid_genome():
    genome = SPACE.genome(dict(block_m=256, block_n=256, stages=1, mma="fma", swizzle=False))
    repaired = kg.repair(SPACE, genome, random.Random(0))
    # one step on block_m or block_n suffices: 128*256*4 = 131072 > 65536, so it needs two steps
    # on one knob or one on each; never a change of unrelated knobs
    assert repaired["mma"] == "fma" and repaired["swizzle"] is False and repaired["stages"] == 1
    assert repaired["block_m"] * repaired["block_n"] * 4 <= 65536


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=5), st.booleans(),
                                                      st.floats(allow_nan=True), st.none()), max_size=6))
def test_malformed_genomes_only_raise_value_error(values):
    try:
        SPACE.genome(values)
    except ValueError:
        pass


def test_a_recorded_space_holds_only_its_members_and_samples_from_them():
    import random

    from evo.kernel_genome import Choice, Space, mutate, sample

    members = [{"a": 1, "b": "x"}, {"a": 4, "b": "y"}, {"a": 8, "b": "x"}]
    space = Space([Choice("a", (1, 2, 4, 8), ordered=True), Choice("b", ("x", "y"))], members=members)
    assert space.size() == 3 and [g.as_dict() for g in space.enumerate()] == [space.genome(m).as_dict() for m in members]
    assert not space.is_valid(space.genome({"a": 2, "b": "x"}))
    rng = random.Random(0)
    assert {sample(space, rng).as_dict()["a"] for _ in range(50)} == {1, 4, 8}
    child = mutate(space, space.genome(members[0]), rng).genome
    assert space.is_valid(child)  # repaired to the nearest member where the move leaves them


def test_knobs_another_design_leaves_unread_are_held_and_never_mutated():
    """A space's ``inactive`` knobs (those a setting's kernel does not read) are held at one value, so
    genomes that differ only in them are one genome, and mutation moves only knobs the kernel reads."""
    design = Space([Boolean("fused"), PowerOfTwo("tile", 16, 128), Choice("engine", ("fma", "mma")), IntRange("depth", 1, 4)],
                   inactive=lambda v: {"engine": "fma", "depth": 1} if v["fused"] else {})
    fused = design.genome(dict(fused=True, tile=32, engine="mma", depth=3))
    assert fused == design.genome(dict(fused=True, tile=32, engine="fma", depth=1))  # one genome, one id
    assert fused["engine"] == "fma" and fused["depth"] == 1
    assert design.genome(dict(fused=False, tile=32, engine="mma", depth=3))["engine"] == "mma"  # read: kept
    rng = random.Random(0)
    for _ in range(50):
        child = kg.mutate(design, fused, rng).genome
        assert child == design.canonical(child) and child != fused
        assert child.differing_knobs(fused) in (("tile",), ("fused",), ("engine", "fused"), ("depth", "fused"),
                                                ("depth", "engine", "fused"))
    for seed in range(20):
        sampled = kg.sample(design, random.Random(seed))
        assert sampled == design.canonical(sampled)


def test_a_design_whose_constraints_reject_most_draws_is_sampled_as_often_and_repaired_within_itself():
    """flashcore's search ran dry at 447 evaluations: uniform draws almost never met its classic design's
    constraints, while the warp-specialised design (most knobs held) was always valid, so sampling and
    repair (switching design mends every classic constraint at once) only ever gave the small second design."""
    knobs = [Boolean("fused"), PowerOfTwo("a", 1, 64), PowerOfTwo("b", 1, 64), PowerOfTwo("c", 1, 64), IntRange("d", 1, 8)]
    strict = [Constraint(f"c{i}", check, "") for i, check in enumerate((
        lambda v: v["fused"] or v["a"] * v["b"] == 64,
        lambda v: v["fused"] or v["b"] * v["c"] == 64,
        lambda v: v["fused"] or v["d"] == v["a"] % 7 + 1))]
    space = Space(knobs, strict, inactive=lambda v: {"a": 1, "b": 1, "c": 1, "d": 1} if v["fused"] else {})
    rng = random.Random(0)
    drawn = [kg.sample(space, rng) for _ in range(200)]
    assert all(space.is_valid(g) and g == space.canonical(g) for g in drawn)
    unfused = [g for g in drawn if not g["fused"]]
    assert 70 <= len(unfused) <= 130 and len({g.id for g in unfused}) >= 4
    broken = Genome.from_mapping(dict(fused=False, a=8, b=8, c=8, d=2))  # a * b == 64, b * c == 64, d wrong
    for seed in range(10):
        repaired = kg.repair(space, broken, random.Random(seed))
        assert space.is_valid(repaired) and not repaired["fused"]  # mended by d, not by switching design
