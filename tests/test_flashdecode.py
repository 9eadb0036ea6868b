"""flashdecode: attention of a few query tokens over a K/V cache, split across it (seeds/flashdecode)."""

import math

import pytest
import torch

from evo.fitness import BuildConfig, Builder, Status, screen
from evo.seeds import get_family

FAMILY = get_family("flashdecode")
RUNTIME = FAMILY.runtime


def _inputs(dims, device="cpu", dtype=torch.float32):
    generator = torch.Generator(device=device).manual_seed(3)
    q = torch.randn(dims["b"], dims["h"], dims["q"], dims["d"], generator=generator, device=device, dtype=dtype)
    k, v = (torch.randn(dims["b"], dims["h_kv"], dims["kv"], dims["d"], generator=generator, device=device, dtype=dtype)
            for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("causal", [0, 1])
def test_the_reference_is_sdpa_s_attention_with_grouped_heads_and_its_top_left_causal_mask(causal):
    """One sequence at a time in fp32, the query heads of a K/V head as rows: what SDPA computes (enable_gqa,
    is_causal aligned to the top left when there are fewer queries than keys)."""
    dims = dict(b=2, h=8, h_kv=2, q=5, kv=37, d=64, causal=causal, bf16=0)
    q, k, v = _inputs(dims)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), enable_gqa=True)
    assert torch.allclose(RUNTIME.reference(dims, (q, k, v)), expected, atol=1e-5, rtol=1e-5)


def test_a_mask_aligned_to_the_lower_right_is_torch_s_causal_lower_right():
    """The reference and the op's PyTorch computation (evo.runtime.attention.sdpa) with lower_right: query token i
    sees keys 0..KV - Q + i, as torch.nn.attention.bias.causal_lower_right says (checked over K/V heads repeated)."""
    from torch.nn.attention.bias import causal_lower_right

    from evo.runtime.attention import sdpa

    dims = dict(b=2, h=8, h_kv=2, q=5, kv=37, d=64, causal=1, lower_right=1, bf16=0)
    q, k, v = _inputs(dims)
    repeated = [t.repeat_interleave(4, dim=1) for t in (k, v)]
    expected = torch.nn.functional.scaled_dot_product_attention(q, *repeated, attn_mask=causal_lower_right(5, 37))
    assert torch.allclose(RUNTIME.reference(dims, (q, k, v)), expected, atol=1e-5, rtol=1e-5)
    assert torch.allclose(sdpa(q, k, v, True, True), expected, atol=1e-5, rtol=1e-5)
    # the last query token sees every key, the first all but the last Q - 1
    assert not torch.allclose(expected, torch.nn.functional.scaled_dot_product_attention(
        q, *repeated, is_causal=True), atol=1e-3)
    assert torch.allclose(sdpa(q, k, v, True, False), RUNTIME.reference(dict(dims, lower_right=0), (q, k, v)),
                          atol=1e-5, rtol=1e-5)


def test_the_op_takes_causal_lower_right_through_its_schema_gradient_and_torch_compile(tmp_path):
    """On CPU tensors the op runs PyTorch's computation: the public function's causal="lower_right", the custom op's
    extra bool, its backward (the aligned gradient schema) and a fullgraph trace all carry the alignment; a causal
    that is none of False, True, "top_left", "lower_right" is refused naming the argument."""
    from evo.runtime.op import Op

    dims = dict(b=1, h=4, h_kv=2, q=3, kv=11, d=64, causal=1, lower_right=1, bf16=0)
    op = Op("flashdecode_lower_right_test", RUNTIME, {}, {"entries": [], "categorical": ["d"], "default": None},
            tmp_path, {"max_abs": 0.03, "max_rel_l2": 1e-2})
    q, k, v = _inputs(dims)
    expected = RUNTIME.reference(dims, (q, k, v))
    assert torch.allclose(RUNTIME.attention(op, q, k, v, causal="lower_right"), expected, atol=1e-5)
    assert torch.allclose(RUNTIME.call_with(op, dims, (q, k, v)), expected, atol=1e-5)
    with pytest.raises(ValueError, match="causal must be"):
        RUNTIME.attention(op, q, k, v, causal="bottom_left")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    op(*leaves, True, True).sum().backward()
    mine = [t.grad for t in leaves]
    others = [t.clone().requires_grad_() for t in (q, k, v)]
    RUNTIME.reference(dims, others).sum().backward()
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(mine, (t.grad for t in others)))
    compiled = torch.compile(lambda q, k, v: op(q, k, v, True, True), fullgraph=True, backend="aot_eager")
    assert torch.allclose(compiled(q, k, v), expected, atol=1e-5)


def test_a_lower_right_shape_needs_causal_and_no_fewer_keys_than_queries():
    from evo.seeds._family import ProblemShape
    from evo.seeds.flashdecode.spec import decode_shape

    FAMILY.validate_shape(decode_shape("ok", 1, 8, 2, 40, q=40, lower_right=True))
    with pytest.raises(ValueError, match="kv >= q"):
        FAMILY.validate_shape(decode_shape("short", 1, 8, 2, 39, q=40, lower_right=True))
    aligned_only = dict(decode_shape("x", 1, 8, 2, 64, q=4).dims, lower_right=1)  # causal 0
    with pytest.raises(ValueError, match="needs causal = 1"):
        FAMILY.validate_shape(ProblemShape("x", tuple(aligned_only.items())))
    chunks = FAMILY.workload("chunked_prefill")
    assert all(s["lower_right"] and s["kv"] >= s["q"] for s in chunks.shapes if s["q"] > 1)
    assert RUNTIME.takes({}, dict(decode_shape("short", 1, 8, 2, 39, q=40).dims, lower_right=1)) is False


def test_splits_fill_the_gpu_never_shorter_than_the_genome_allows(monkeypatch):
    monkeypatch.setattr(RUNTIME, "multiprocessors", lambda: 132)
    genome = dict(warps=4, keys_per_warp=32, split_waves=2, min_split_keys=256)
    one_sequence = dict(b=1, h=32, h_kv=8, q=1, kv=4096)
    keys, splits = RUNTIME.split_keys(genome, one_sequence)  # 8 row tiles: 33 splits wanted, 16 at most
    assert (keys, splits) == (256, 16) and keys % (4 * 32) == 0
    many = dict(b=64, h=32, h_kv=8, q=1, kv=4096)  # 512 row tiles already fill 132 SMs twice: no split
    assert RUNTIME.split_keys(genome, many) == (4096, 1)
    ragged = dict(b=1, h=8, h_kv=1, q=1, kv=1000)
    keys, splits = RUNTIME.split_keys(genome, ragged)
    assert splits == math.ceil(1000 / keys) and keys * (splits - 1) < 1000 <= keys * splits
    assert RUNTIME.row_tiles(dict(h=28, h_kv=4, q=5)) == 3  # 35 rows of (query head, query token)
    # balanced: 512 row tiles on 396 resident blocks leave a last wave 29% full; three splits fill 97% of it
    balanced = dict(genome, split_policy="balanced", split_waves=1)
    assert RUNTIME.split_keys(balanced, many, resident=396)[1] == 3
    assert RUNTIME.split_keys(balanced, many, resident=None) == RUNTIME.split_keys(genome, many)  # no occupancy: fill


def test_bytes_moved_count_the_cache_once_and_the_constraint_keeps_stages_in_shared_memory():
    mission = FAMILY.mission_shape
    cache = 2 * 1 * 8 * 4096 * 128 * 2
    assert FAMILY.bytes_moved(mission) == cache + 2 * 2 * 32 * 128 and FAMILY.memory_bound
    seed = FAMILY.seed_genomes[0].as_dict()
    assert not FAMILY.space.values_valid(dict(seed, warps=8, keys_per_warp=64, stages=4))
    members = [g for g in FAMILY.space.enumerate()]
    assert members and all(RUNTIME.shared_bytes(g.as_dict(), 128) <= 227 * 1024 for g in members)


def _covering(space) -> list:
    """Genomes that hold every value of every knob the build reads, each build once."""
    chosen, seen = [], set()
    for knob in ("warps", "keys_per_warp", "stages", "combine"):
        for value in space.knob(knob).values:
            genome = next(g for g in space.enumerate() if g[knob] == value)
            key = tuple(genome[k] for k in ("warps", "keys_per_warp", "stages", "combine"))
            if key not in seen:
                seen.add(key)
                chosen.append(genome)
    return chosen


@pytest.mark.nvcc
@pytest.mark.slow
def test_every_knob_value_compiles_and_passes_the_screen(cache_dir):
    builder = Builder(BuildConfig(cache_dir))
    for genome in _covering(FAMILY.space) + [FAMILY.seed_genomes[0]]:
        recipe = FAMILY.build_recipe(genome)
        result = screen(builder.build(genome.id, recipe), recipe.output, FAMILY.screen_limits)
        assert result.status in (Status.OK, Status.SCREENED_OUT), result.message
        assert result.status is Status.OK or "spill" in result.message, result.message


@pytest.mark.gpu
def test_the_seed_and_each_combine_are_right_on_every_shape(cache_dir):
    """Each way of merging the splits, on the family's shapes (ragged cache lengths, 35 rows, causal, fp16 at
    D 64) and a long cache, against the fp32 reference; the output poisoned first."""
    builder = Builder(BuildConfig(cache_dir))
    seed = FAMILY.seed_genomes[0]
    for combine in ("kernel", "overlapped_kernel", "last_block"):
        genome = FAMILY.space.genome(dict(seed.as_dict(), combine=combine, split_waves=4, min_split_keys=64))
        build = builder.build(genome.id, FAMILY.build_recipe(genome))
        assert build.status is Status.OK, build.message
        artifact = cache_dir / f"{genome.id}.cubin"
        artifact.write_bytes(build.artifact)
        loaded = FAMILY.load(artifact, genome)
        for shape in FAMILY.shapes:
            inputs = FAMILY.make_inputs(shape, torch.Generator(device="cuda").manual_seed(7))
            for _ in range(2):  # twice: the tickets of the last block's merge count on across launches
                out = FAMILY.make_output(shape).fill_(float("nan"))
                FAMILY.launch(loaded, shape, inputs, out)
                torch.cuda.synchronize()
                reference = FAMILY.reference(shape, inputs)
                assert not out.isnan().any(), (combine, shape.name)
                assert (out.float() - reference).abs().max().item() <= FAMILY.tolerance.max_abs, (combine, shape.name)


@pytest.mark.gpu
def test_pytorch_s_lower_right_attention_takes_grouped_heads_on_the_gpu():
    """On the GPU the anchor and the op's PyTorch path (evo.runtime.attention.sdpa) pass grouped K/V heads to the
    lower-right mask's own dispatch (flash attention, no K/V copies): outputs and gradients match the fp32
    reference and SDPA over K/V heads repeated."""
    from torch.nn.attention.bias import causal_lower_right

    from evo.runtime.attention import sdpa, sdpa_gradient

    dims = dict(b=2, h=8, h_kv=2, q=40, kv=1000, d=128, causal=1, lower_right=1, bf16=1)
    q, k, v = _inputs(dims, device="cuda", dtype=torch.bfloat16)
    out = sdpa(q, k, v, True, True)
    assert (out.float() - RUNTIME.reference(dims, (q, k, v))).abs().max().item() <= FAMILY.tolerance.max_abs
    repeated = [t.repeat_interleave(4, dim=1).requires_grad_() for t in (k, v)]
    leaf_q = q.clone().requires_grad_()
    grad = torch.randn_like(out)
    expected = torch.nn.functional.scaled_dot_product_attention(leaf_q, *repeated, attn_mask=causal_lower_right(40, 1000))
    expected.backward(grad)
    dq, dk, dv = sdpa_gradient(grad, q, k, v, True, True)
    summed = [t.grad.unflatten(1, (2, 4)).sum(2) for t in repeated]  # a K/V head's gradient: its query heads' sum
    for mine, theirs in zip((dq, dk, dv), (leaf_q.grad, *summed)):
        assert (mine.float() - theirs.float()).abs().max().item() <= 0.05


@pytest.mark.gpu
def test_the_exported_op_s_eager_calls_run_the_prepared_launch(tmp_path):
    """The exported op, the kernel forced: a plain eager call's second and third runs go straight to the prepared
    launch (the fast path remembered after the first), right against the fp32 reference each time, for SDPA's
    causal mask and the lower-right one; K/V views take the full path, also right."""
    from tests.exporting import export_stored, recorded_pass, run_standalone

    seed = FAMILY.seed_genomes[0]
    out = export_stored(FAMILY, seed, recorded_pass(seed, FAMILY.shapes), tmp_path)
    run_standalone(f"""
        import os, torch
        os.environ["EVO_OP_CACHE"] = {str(tmp_path / "decisions")!r}
        F = torch.nn.functional
        import flashdecode_{seed.id} as k
        from torch.nn.attention.bias import causal_lower_right
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(2, 8, 4, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        kk, v = (torch.randn(2, 2, 1500, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        r = lambda t: t.float().repeat_interleave(4, dim=1)
        for causal, mask in ((True, dict(is_causal=True)), ("lower_right", dict(attn_mask=causal_lower_right(4, 1500)))):
            reference = F.scaled_dot_product_attention(q.float(), r(kk), r(v), **mask)
            with k.OP.forcing({seed.id!r}):
                views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (kk, v)]  # [B, S, H, D] storage
                for operands in ((kk, v), views):
                    remembered = len(k.OP._fast)
                    for call in range(3):  # the first remembers what its signature runs; the others run that
                        o = k.attention(q, *operands, causal=causal)
                        assert (o.float() - reference).abs().max() < 0.02, (causal, call)
                        assert len(k.OP._fast) == remembered + 1, (causal, call)
        print("fast path ok")
        """, out, tmp_path, refusals=0)
