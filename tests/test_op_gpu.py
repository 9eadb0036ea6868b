"""The exported attention and patch-embedding ops on the GPU, as a model calls them: transformers' [B, S, H, D]
views read without a copy, gradients equal to stock's, torch.compile(fullgraph=True) over the public function,
CUDA-graph capture, the caller's stream, and concurrent first calls from threads (the kernels loaded once)."""

import pytest

from evo.seeds import get_family
from tests.exporting import export_stored, recorded_pass, run_standalone
from evo.seeds.flashcore.designs import WARP_SPECIALIZED
from evo.seeds.vit_gemm.designs import CLUSTERED

pytestmark = pytest.mark.gpu
FLASHCORE, VIT = get_family("flashcore"), get_family("vit_gemm")


@pytest.fixture(scope="module")
def attention_op(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gpu_attention")
    return export_stored(FLASHCORE, WARP_SPECIALIZED, recorded_pass(WARP_SPECIALIZED, FLASHCORE.shapes), tmp_path), tmp_path


def test_attention_as_a_model_calls_it(attention_op):
    out, tmp_path = attention_op
    run_standalone(f"""
        import os, threading, torch
        os.environ["EVO_OP_CACHE"] = {str(tmp_path / "decisions")!r}
        F = torch.nn.functional
        import flashcore_{WARP_SPECIALIZED.id} as k
        kernel = {WARP_SPECIALIZED.id!r}
        g = torch.Generator(device="cuda").manual_seed(0)

        def bshd(b, s, h, d, dtype=torch.bfloat16):  # transformers' layout: [B, S, H, D] seen as [B, H, S, D]
            return torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=g).transpose(1, 2)

        q, kk, v = bshd(2, 300, 8, 128), bshd(2, 300, 2, 128), bshd(2, 300, 2, 128)
        with k.OP.forcing(kernel):  # the kernel itself, whatever is measured faster
            out = k.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
            stock = F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
            assert (out.float() - stock.float()).abs().max() < 0.02
            assert out.transpose(1, 2).is_contiguous()  # laid out as q: transformers' transpose back is free
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                k.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
                torch.cuda.synchronize()
            kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            assert kernels and all("flashcore" in name for name in kernels), kernels  # no copy of q, k or v

            # gradients: the forward evolved, the backward PyTorch's
            leaves = [t.detach().requires_grad_() for t in (q, kk, v)]
            stock_leaves = [t.detach().requires_grad_() for t in (q, kk, v)]
            weight = torch.randn_like(out)
            (k.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True) * weight).sum().backward()
            (F.scaled_dot_product_attention(*stock_leaves, is_causal=True, enable_gqa=True) * weight).sum().backward()
            for mine, theirs in zip(leaves, stock_leaves):
                assert (mine.grad.float() - theirs.grad.float()).abs().max() < 0.05 * theirs.grad.float().abs().max()

            # torch.compile(fullgraph=True) over the public function, with a mask falling back inside the graph
            compiled = torch.compile(lambda q, kk, v: k.attention(q, kk, v, causal=True) + 1, fullgraph=True)
            assert (compiled(q, kk, v) - out - 1).float().abs().max() < 0.02
            masked = torch.compile(lambda q, kk, v, m: k.scaled_dot_product_attention(q, kk, v, attn_mask=m, enable_gqa=True),
                                   fullgraph=True)
            mask = torch.randn(300, 300, device="cuda", dtype=torch.bfloat16)
            assert torch.allclose(masked(q, kk, v, mask), F.scaled_dot_product_attention(q, kk, v, attn_mask=mask, enable_gqa=True),
                                  atol=2e-2)

            # a CUDA graph, and a side stream
            static = [t.clone() for t in (q, kk, v)]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                k.attention(*static, causal=True)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = k.attention(*static, causal=True)
            for t, fresh in zip(static, (bshd(2, 300, 8, 128), bshd(2, 300, 2, 128), bshd(2, 300, 2, 128))):
                t.copy_(fresh)
            graph.replay()
            torch.cuda.synchronize()
            expected = F.scaled_dot_product_attention(*static, is_causal=True, enable_gqa=True)
            assert (captured.float() - expected.float()).abs().max() < 0.02
            with torch.cuda.stream(side):
                on_side = k.attention(q, kk, v, causal=True)
            side.synchronize()
            assert (on_side.float() - stock.float()).abs().max() < 0.02

            # a prompt chunk after a cache (the mask aligned to the lower right) and cross-attention: the kernel,
            # through the public function and SDPA's causal_lower_right, three calls each (the fast path after one)
            from torch.nn.attention.bias import causal_lower_right
            chunk, cache = bshd(2, 100, 8, 128), [bshd(2, 900, 2, 128) for _ in range(2)]
            chunked = F.scaled_dot_product_attention(chunk, *cache, attn_mask=causal_lower_right(100, 900), enable_gqa=True)
            crossed = F.scaled_dot_product_attention(chunk, *cache, enable_gqa=True)
            for _ in range(3):
                assert (k.attention(chunk, *cache, causal="lower_right").float() - chunked.float()).abs().max() < 0.02
                assert (k.scaled_dot_product_attention(chunk, *cache, attn_mask=causal_lower_right(100, 900), enable_gqa=True)
                        .float() - chunked.float()).abs().max() < 0.02
                assert (k.attention(chunk, *cache).float() - crossed.float()).abs().max() < 0.02
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                k.attention(chunk, *cache, causal="lower_right")
                torch.cuda.synchronize()
            kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            assert kernels and all("flashcore" in name for name in kernels), kernels

        # concurrent first calls of a new shape from threads: one decision, one load per device
        shapes = [bshd(1, 777, 8, 128) for _ in range(3)]
        results, errors = [], []
        def call():
            try:
                results.append(k.attention(*shapes, causal=True))
            except Exception as error:
                errors.append(error)
        threads = [threading.Thread(target=call) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        reference = F.scaled_dot_product_attention(*(t.float() for t in shapes), is_causal=True)
        assert all((r.float() - reference).abs().max() < 0.02 for r in results)
        assert len([key for key in k.OP._loaded if key[1] == kernel]) <= 1
        print(k.choose(dict(b=1, h=8, s=777, d=128, causal=1, h_kv=8, bf16=1)))  # kv and lower_right left out
        print("attention ok")
        """, out, tmp_path, refusals=0)


def test_patch_embedding_gradients_and_compile(tmp_path):
    out = export_stored(VIT, CLUSTERED, recorded_pass(CLUSTERED, VIT.shapes), tmp_path)
    run_standalone(f"""
        import os, torch
        os.environ["EVO_OP_CACHE"] = {str(tmp_path / "decisions")!r}
        import vit_gemm_{CLUSTERED.id} as k
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(4, 196, 768, device="cuda", generator=g).bfloat16().requires_grad_()
        w = (torch.randn(768, 768, device="cuda", generator=g) / 768 ** 0.5).bfloat16().requires_grad_()
        bias = torch.randn(768, device="cuda", generator=g).bfloat16().requires_grad_()
        pos = torch.randn(196, 768, device="cuda", generator=g).bfloat16().requires_grad_()
        with k.OP.forcing({CLUSTERED.id!r}):
            out = k.patch_embed(x, w, bias, pos)
            stock_inputs = [t.detach().requires_grad_() for t in (x, w, bias, pos)]
            stock = (stock_inputs[0] @ stock_inputs[1].T + stock_inputs[2]) + stock_inputs[3]
            assert (out.float() - stock.float()).abs().max() < 0.1
            weight = torch.randn_like(out)
            (out * weight).sum().backward()
            (stock * weight).sum().backward()
            for mine, theirs in zip((x, w, bias, pos), stock_inputs):
                scale = theirs.grad.float().abs().max()
                assert (mine.grad.float() - theirs.grad.float()).abs().max() <= 0.02 * scale, (mine.grad - theirs.grad).abs().max()
            compiled = torch.compile(lambda *t: k.patch_embed(*t) * 2, fullgraph=True)
            assert (compiled(x, w, bias, pos).float() / 2 - out.float()).abs().max() < 0.1
            with torch.no_grad():  # plain eager calls: the second and third run the prepared launch
                for _ in range(3):
                    again = k.patch_embed(x.detach(), w.detach(), bias.detach(), pos.detach())
                    assert (again.float() - stock.float()).abs().max() < 0.1
        print("patch embedding ok")
        """, out, tmp_path, refusals=0)


def test_attention_on_every_gpu_of_the_process(attention_op):
    """A process with several GPUs: calls on each device run there (kernels loaded, decided and launched per
    device; the current device may be another one)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here")
    out, tmp_path = attention_op
    run_standalone(f"""
        import os, torch
        os.environ["EVO_OP_CACHE"] = {str(tmp_path / "decisions_gpus")!r}
        F = torch.nn.functional
        import flashcore_{WARP_SPECIALIZED.id} as k
        torch.cuda.set_device(0)
        for device in range(torch.cuda.device_count()):
            g = torch.Generator(device=f"cuda:{{device}}").manual_seed(device)
            q, kk, v = (torch.randn(1, 8, 700, 128, device=f"cuda:{{device}}", dtype=torch.bfloat16, generator=g)
                        for _ in range(3))
            with k.OP.forcing({WARP_SPECIALIZED.id!r}):
                for _ in range(3):  # the full path, then the prepared one
                    o = k.attention(q, kk, v, causal=True)
            measured = k.attention(q, kk, v, causal=True)
            reference = F.scaled_dot_product_attention(q.float(), kk.float(), v.float(), is_causal=True)
            assert o.device == q.device and (o.float() - reference).abs().max() < 0.02
            assert (measured.float() - reference).abs().max() < 0.02
        assert {{key[0] for key in k.OP._loaded}} == set(range(torch.cuda.device_count())), k.OP._loaded.keys()
        print("every gpu ok")
        """, out, tmp_path, refusals=0)
