"""FlashCore's exported op as a drop-in for PyTorch's SDPA and transformers' attention. On the CPU (CI) every
call runs PyTorch's computation: the integration paths run and their results equal stock's exactly; the
custom op's backward (PyTorch's SDPA backward) gives SDPA's gradients, also under torch.compile. On the GPU
(`-m gpu`) a verified kernel runs where it is measured faster, and results and gradients match stock."""

import pytest

from evo.seeds import get_family
from tests.exporting import export_stored, recorded_pass, run_standalone
from evo.seeds.flashcore.designs import WARP_SPECIALIZED

FAMILY = get_family("flashcore")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("attention")
    return export_stored(FAMILY, WARP_SPECIALIZED, recorded_pass(WARP_SPECIALIZED, FAMILY.shapes), tmp_path), tmp_path


@pytest.mark.nvcc
def test_sdpa_s_signature_and_semantics_on_the_cpu(package):
    out, tmp_path = package
    run_standalone(f"""
        import torch
        F = torch.nn.functional
        import flashcore_{WARP_SPECIALIZED.id} as k
        g = torch.Generator().manual_seed(0)
        q, kk, v = (torch.randn(2, 4, 33, 64, generator=g) for _ in range(3))
        kv2 = [torch.randn(2, 2, 20, 64, generator=g) for _ in range(2)]  # grouped heads, another length
        mask = torch.randn(33, 33, generator=g)
        cases = [((q, kk, v), {{}}), ((q, kk, v), dict(is_causal=True)), ((q, kk, v), dict(attn_mask=mask)),
                 ((q, kk, v), dict(scale=0.3)), ((q, *kv2), dict(enable_gqa=True)), ((q.half(), kk.half(), v.half()), {{}}),
                 ((q[:, :, :7], kk, v), dict(is_causal=True))]  # cross-attention, causal from the top left
        for args, kwargs in cases:
            assert torch.equal(k.scaled_dot_product_attention(*args, **kwargs), F.scaled_dot_product_attention(*args, **kwargs))
        assert torch.equal(k.attention(q, *kv2, causal=True), F.scaled_dot_product_attention(q, *kv2, is_causal=True, enable_gqa=True))
        # chunked prefill: the queries the last of the keys, through the public function and SDPA's own mask
        from torch.nn.attention.bias import causal_lower_right, causal_upper_left
        chunk = q[:, :, :7]
        stock = F.scaled_dot_product_attention(chunk, *kv2, attn_mask=causal_lower_right(7, 20), enable_gqa=True)
        assert torch.equal(k.attention(chunk, *kv2, causal="lower_right"), stock)
        assert torch.equal(k.scaled_dot_product_attention(chunk, *kv2, attn_mask=causal_lower_right(7, 20), enable_gqa=True), stock)
        assert torch.equal(k.scaled_dot_product_attention(chunk, *kv2, attn_mask=causal_upper_left(7, 20), enable_gqa=True),
                           F.scaled_dot_product_attention(chunk, *kv2, is_causal=True, enable_gqa=True))
        assert torch.equal(k.attention(q, kk, v, causal="lower_right"), F.scaled_dot_product_attention(q, kk, v, is_causal=True))
        refuses(k.attention, (q, kk, v, "bottom_left"))
        with k.patched_sdpa():
            assert F.scaled_dot_product_attention is not k._SDPA if hasattr(k, "_SDPA") else True
            patched = F.scaled_dot_product_attention(q, kk, v)
        assert torch.equal(patched, k.family._SDPA(q, kk, v)) and F.scaled_dot_product_attention is k.family._SDPA
        refuses(lambda *a: (_ for _ in ()).throw(ValueError("x")), ())  # the helper itself
        try:
            k.scaled_dot_product_attention(q, *kv2)  # grouped heads without enable_gqa: SDPA's own error
        except RuntimeError as error:
            print("sdpa's error:", str(error)[:60])
        else:
            raise SystemExit("grouped heads without enable_gqa were accepted")
        """, out, tmp_path, refusals=2)


@pytest.mark.nvcc
def test_the_custom_op_s_backward_is_sdpa_s_and_compiles(package):
    """torch.ops.evo.<op> itself on CPU tensors (its body then runs SDPA): gradients through the registered
    backward equal SDPA's autograd, eagerly and under torch.compile(fullgraph=True)."""
    out, tmp_path = package
    run_standalone(f"""
        import torch
        F = torch.nn.functional
        import flashcore_{WARP_SPECIALIZED.id} as k
        op = torch.ops.evo.flashcore_{WARP_SPECIALIZED.id}
        def grads(run, *shapes):
            g = torch.Generator().manual_seed(1)
            tensors = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]
            out = run(*tensors)
            assert out.grad_fn is not None
            (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum().backward()
            return [out.detach()] + [t.grad for t in tensors]
        shapes = [(1, 4, 40, 64), (1, 2, 40, 64), (1, 2, 40, 64)]
        stock = grads(lambda q, kk, v: F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True), *shapes)
        for run in (lambda q, kk, v: op(q, kk, v, True), torch.compile(lambda q, kk, v: op(q, kk, v, True), backend="aot_eager", fullgraph=True),
                    torch.compile(lambda q, kk, v: k.attention(q, kk, v, causal=True), backend="aot_eager", fullgraph=True)):
            for mine, theirs in zip(grads(run, *shapes), stock):
                assert torch.allclose(mine, theirs, atol=1e-10), (mine - theirs).abs().max()
        from torch.nn.attention.bias import causal_lower_right
        chunk = [(1, 4, 10, 64), (1, 2, 40, 64), (1, 2, 40, 64)]  # a chunk of 10 queries, the last of 40 keys
        stock = grads(lambda q, kk, v: F.scaled_dot_product_attention(q, kk, v, attn_mask=causal_lower_right(10, 40),
                                                                      enable_gqa=True), *chunk)
        for run in (lambda q, kk, v: op(q, kk, v, True, True),
                    torch.compile(lambda q, kk, v: op(q, kk, v, True, True), backend="aot_eager", fullgraph=True),
                    torch.compile(lambda q, kk, v: k.attention(q, kk, v, causal="lower_right"), backend="aot_eager", fullgraph=True)):
            for mine, theirs in zip(grads(run, *chunk), stock):
                assert torch.allclose(mine, theirs, atol=1e-10), (mine - theirs).abs().max()
        print("gradients ok")
        """, out, tmp_path, refusals=0)


@pytest.mark.nvcc
def test_transformers_models_with_the_op_registered_match_stock(package):
    """Random-weight Llama-, Qwen2- and Mistral-shaped models (grouped K/V heads) built from configs: logits with
    attn_implementation set to the op's registered name equal sdpa's, with and without a padding mask."""
    pytest.importorskip("transformers")
    out, tmp_path = package
    run_standalone(f"""
        import torch, transformers
        import flashcore_{WARP_SPECIALIZED.id} as k
        name = k.register_with_transformers("evo_test")
        small = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
        for config in (transformers.LlamaConfig(**small), transformers.Qwen2Config(**small), transformers.MistralConfig(**small)):
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
            ids = torch.randint(0, 300, (2, 37))
            padding = torch.ones(2, 37, dtype=torch.long)
            padding[1, :5] = 0
            with torch.no_grad():
                stock = [model(ids).logits, model(ids, attention_mask=padding).logits]
                model.set_attn_implementation(name)
                mine = [model(ids).logits, model(ids, attention_mask=padding).logits]
            assert model.config._attn_implementation == name
            for a, b in zip(mine, stock):
                assert torch.equal(a, b), (a - b).abs().max()
            print(type(model).__name__, "matches")
        """, out, tmp_path, refusals=0)
