"""Exported ops as models call them, on the GPU, against stock PyTorch in the same process.

    python benchmarks/op_in_models.py --attention OP_DIR [--attention-fp16 OP_DIR] [--patch OP_DIR] \
        [--parts host,sweep,llama,vit] [--json OUT.json]

OP_DIR: a package `evo export` wrote for a flashcore workload (bf16 grouped heads: llm_bf16; fp16: prefill) or a
vit_gemm one (encoders). Parts:
  host   host time of one eager call (a shape whose GPU time is small), the op against SDPA's, with
         transformers' [B, S, H, D] views; where the op's time goes (cProfile)
  sweep  shapes no workload lists (>= 40 a family): each first call's latency (the decision), then the op and
         PyTorch's computation timed as a caller sees them (eager calls back to back, CUDA events), in turns;
         a call more than 2% slower than PyTorch is flagged
  llama  a Llama-3-8B-shaped decoder stack (transformers, random weights, bf16, 2 layers) with the op registered
         as its attention, against sdpa: logits, end-to-end forward time over sequence lengths 1..8192, and the
         time inside attention (profiler: the attention kernels' own time)
  vit    timm's ViT-B/16 (random weights) with the patch embedding fused into the vit_gemm op and attention
         through the flashcore op, against stock, over batches
Decisions go to a fresh EVO_OP_CACHE under /tmp unless it is set.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import importlib
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evo.runtime.decisions import series_time  # noqa: E402

F = torch.nn.functional
SDPA = F.scaled_dot_product_attention
SLOWER = 0.02


def load(folder: str):
    sys.path.insert(0, str(Path(folder).resolve()))
    module = json.loads((Path(folder) / "metadata.json").read_text())["module"]
    return importlib.import_module(module)


def events_time(run, calls: int) -> float:
    """Seconds per call of ``calls`` eager calls back to back (host cost included): the op's own timing."""
    return series_time(run, calls, torch.device("cuda", torch.cuda.current_device()))


def paired(runs: dict, rounds: int = 15, seconds: float = 4e-3) -> dict:
    """Median seconds per call of each run, timed in turns (eager, back to back, CUDA events)."""
    for run in runs.values():
        run()
    torch.cuda.synchronize()
    start = time.perf_counter()
    next(iter(runs.values()))()
    torch.cuda.synchronize()
    calls = max(3, min(200, int(seconds / max(time.perf_counter() - start, 1e-6))))
    times = {name: [] for name in runs}
    for number in range(rounds):
        order = list(runs.items()) if number % 2 == 0 else list(reversed(runs.items()))
        for name, run in order:
            times[name].append(events_time(run, calls))
    return {name: statistics.median(values) for name, values in times.items()}


def first_call(run) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - start


# -- host time --------------------------------------------------------------------------------------
def host(op) -> dict:
    """Host seconds a call: a small shape (1 x 8 heads x 128 x 128, bf16, grouped K/V) in transformers' layout."""
    def bshd(s, h):
        return torch.randn(1, s, h, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)

    q, k, v = bshd(128, 32), bshd(128, 8), bshd(128, 8)
    runs = {"sdpa": lambda: SDPA(q, k, v, is_causal=True, enable_gqa=True),
            "op": lambda: op.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)}
    kernel, why = op.choose(dict(b=1, h=32, s=128, d=128, causal=1, h_kv=8, bf16=1), q.device)
    result = {"shape": "b1 h32/8 s128 d128 causal bf16, [B,S,H,D] views", "choice": kernel or "pytorch", "why": why}
    forced = {"op (its kernel forced)": runs["op"]}
    for name, run in {**runs, **forced}.items():
        context = op.OP.forcing(next(iter(op.KERNELS))) if "forced" in name else _null()
        with context:
            for _ in range(50):
                run()
            torch.cuda.synchronize()
            samples = []
            for _ in range(7):
                start = time.perf_counter()
                for _ in range(500):
                    run()
                samples.append((time.perf_counter() - start) / 500)  # the host's pace: the GPU keeps up
                torch.cuda.synchronize()
            result[f"{name} host us"] = round(statistics.median(samples) * 1e6, 2)
    with op.OP.forcing(next(iter(op.KERNELS))):
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            runs["op"]()
        profile.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    result["profile"] = text.getvalue().splitlines()[-20:]
    return result


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- unseen shapes ------------------------------------------------------------------------------------
LLAMA_SWEEP = [dict(b=1, h=32, h_kv=8, s=s) for s in (1, 7, 64, 100, 255, 333, 512, 777, 1000, 1500, 2047, 2500,
                                                      3000, 4000, 5000, 6000, 7000)]
LLAMA_SWEEP += [dict(b=2, h=32, h_kv=8, s=1000), dict(b=8, h=32, h_kv=8, s=512), dict(b=1, h=28, h_kv=4, s=1024),
                dict(b=1, h=28, h_kv=4, s=3000), dict(b=1, h=8, h_kv=1, s=1000), dict(b=1, h=8, h_kv=1, s=8192),
                dict(b=1, h=32, h_kv=8, s=8191)]
FP16_SWEEP = [dict(b=b, h=h, h_kv=h, s=s, d=d, causal=c) for b, h, s, d, c in (
    (1, 12, 257, 64, 0), (1, 12, 577, 64, 0), (4, 12, 197, 64, 0), (32, 12, 197, 64, 0), (2, 16, 257, 64, 0),
    (1, 16, 1025, 64, 0), (8, 12, 384, 64, 0), (1, 12, 77, 64, 1), (4, 12, 512, 64, 1), (1, 12, 2000, 64, 1),
    (4, 16, 1024, 64, 0), (1, 16, 4096, 64, 0), (2, 16, 4096, 128, 0), (1, 16, 1000, 128, 0), (1, 24, 4096, 64, 0),
    (16, 16, 256, 64, 0), (1, 8, 3000, 128, 1), (1, 32, 700, 128, 1), (64, 12, 50, 64, 0), (2, 12, 1370, 64, 0))]


def attention_sweep(op, shapes, dtype, causal_default=1, d_default=128) -> list[dict]:
    rows = []
    for shape in shapes:
        b, h, h_kv, s = shape["b"], shape["h"], shape["h_kv"], shape["s"]
        d, causal = shape.get("d", d_default), bool(shape.get("causal", causal_default))
        q = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, h_kv, s, d, device="cuda", dtype=dtype) for _ in range(2))
        grouped = h != h_kv
        mine = lambda: op.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=grouped)  # noqa: E731
        stock = lambda: SDPA(q, k, v, is_causal=causal, enable_gqa=grouped)  # noqa: E731
        stock_first = first_call(stock)  # PyTorch's own first call of the shape (cuDNN plans it), which stock pays too
        first = first_call(mine)
        reference = SDPA(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=grouped)
        error = (mine().float() - reference).abs().max().item()
        times = paired({"op": mine, "pytorch": stock})
        dims = dict(b=b, h=h, s=s, d=d, causal=int(causal), h_kv=h_kv, bf16=int(dtype == torch.bfloat16))
        choice, _ = op.choose(dims, q.device)
        rows.append(dict(shape=f"b{b} h{h}/{h_kv} s{s} d{d}{' causal' if causal else ''}", runs=choice or "pytorch",
                         first_call_ms=round(first * 1e3, 2), pytorch_first_call_ms=round(stock_first * 1e3, 2),
                         op_us=round(times["op"] * 1e6, 2),
                         pytorch_us=round(times["pytorch"] * 1e6, 2), speedup=round(times["pytorch"] / times["op"], 3),
                         max_abs_error=round(error, 4)))
        print(rows[-1], flush=True)
    return rows


PATCH_SWEEP = [dict(n=n, k=k, p=p, images=b) for n, k, p, bs in (
    (768, 768, 196, (2, 3, 4, 16, 32, 48, 128)), (1024, 768, 196, (2, 16, 32)), (384, 768, 196, (1, 8, 64, 256)),
    (192, 768, 196, (1, 8, 64)), (768, 768, 576, (1, 8, 32)), (1024, 588, 576, (1, 8, 32)), (1408, 588, 256, (1, 8, 32)),
    (384, 588, 256, (1, 8, 64)), (768, 588, 256, (1, 8, 64)), (768, 768, 256, (1, 8, 64)), (1280, 588, 256, (2, 16, 32)),
    (768, 3072, 49, (1, 16, 128))) for b in bs]


def patch_sweep(op) -> list[dict]:
    rows = []
    for shape in PATCH_SWEEP:
        n, k, p, images = shape["n"], shape["k"], shape["p"], shape["images"]
        x = torch.randn(images, p, k, device="cuda").bfloat16()
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).bfloat16()
        bias, pos = torch.randn(n, device="cuda").bfloat16(), torch.randn(p, n, device="cuda").bfloat16()
        x2d = x.view(-1, k)
        mine = lambda: op.patch_embed(x, w, bias, pos)  # noqa: E731
        stock = lambda: torch.addmm(bias, x2d, w.t()).view(images, p, n).add_(pos)  # noqa: E731
        stock_first = first_call(stock)
        first = first_call(mine)
        reference = x.float() @ w.float().t() + bias.float() + pos.float()
        error = (mine().float() - reference).abs().max().item()
        times = paired({"op": mine, "pytorch": stock})
        choice, _ = op.choose(dict(m=images * p, n=n, k=k, p=p), x.device)
        rows.append(dict(shape=f"n{n} k{k} p{p} x{images}", runs=choice or "pytorch", first_call_ms=round(first * 1e3, 2),
                         pytorch_first_call_ms=round(stock_first * 1e3, 2),
                         op_us=round(times["op"] * 1e6, 2), pytorch_us=round(times["pytorch"] * 1e6, 2),
                         speedup=round(times["pytorch"] / times["op"], 3), max_abs_error=round(error, 4)))
        print(rows[-1], flush=True)
    return rows


def summary(rows: list[dict]) -> dict:
    speedups = [r["speedup"] for r in rows]
    geomean = float(torch.tensor(speedups).log().mean().exp())
    return dict(shapes=len(rows), geomean=round(geomean, 3), worst=min(speedups),
                slower_than_2pct=[r["shape"] for r in rows if r["speedup"] < 1 - SLOWER],
                first_call_ms_max=max(r["first_call_ms"] for r in rows),
                first_call_ms_median=statistics.median(r["first_call_ms"] for r in rows))


# -- models ---------------------------------------------------------------------------------------------
def attention_kernel_us(run, names: tuple[str, ...]) -> float:
    """GPU time per call of the kernels whose names hold one of ``names`` (the profiler's)."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            run()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in prof.key_averages() if any(n in e.key.lower() for n in names))
    return total / 3


ATTENTION_KERNELS = ("flashcore", "flash", "fmha", "cudnn", "attention", "sdpa")


def llama(op, lengths=(1, 16, 100, 128, 333, 512, 1000, 2048, 3000, 4096, 8192)) -> list[dict]:
    import transformers

    name = op.register_with_transformers("evo")
    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
                                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                      max_position_embeddings=8192, rope_theta=500000.0)
    torch.manual_seed(0)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaModel(config).to("cuda", torch.bfloat16).eval()
    evo_model = copy.deepcopy(model)
    evo_model.set_attn_implementation(name)
    rows = []
    for s in lengths:
        ids = torch.randint(0, config.vocab_size, (1, s), device="cuda")

        def stock():
            return model(ids).last_hidden_state

        def mine():
            return evo_model(ids).last_hidden_state

        with torch.no_grad():
            first = first_call(mine)
            difference = (mine().float() - stock().float()).abs().max().item()
            scale = stock().float().abs().max().item()
            times = paired({"evo": mine, "sdpa": stock}, rounds=9, seconds=20e-3)
            inside = {key: attention_kernel_us(run, ATTENTION_KERNELS) for key, run in (("evo", mine), ("sdpa", stock))}
        rows.append(dict(s=s, first_call_ms=round(first * 1e3, 1), evo_ms=round(times["evo"] * 1e3, 3),
                         sdpa_ms=round(times["sdpa"] * 1e3, 3), speedup=round(times["sdpa"] / times["evo"], 3),
                         attention_us=dict(evo=round(inside["evo"], 1), sdpa=round(inside["sdpa"], 1)),
                         attention_speedup=round(inside["sdpa"] / inside["evo"], 3) if inside["evo"] else None,
                         attention_share=round(inside["sdpa"] / 1e3 / (times["sdpa"] * 1e3), 3),
                         max_abs_difference=round(difference, 4), output_scale=round(scale, 2)))
        print(rows[-1], flush=True)
    return rows


def vit(attention_op, patch_op, batches=(1, 8, 32, 64, 128), dtype=torch.bfloat16) -> list[dict]:
    """timm's ViT-B/16: stock against the patch embedding fused into the vit_gemm op (``patch_op``, if given)
    and attention through ``attention_op``, and each alone; where the evo forward's host time goes."""
    import timm

    torch.manual_seed(0)
    stock_model = timm.create_model("vit_base_patch16_224", pretrained=False).to("cuda", dtype).eval()
    fused = timm.create_model("vit_base_patch16_224", pretrained=False).to("cuda", dtype).eval()
    fused.load_state_dict(stock_model.state_dict())
    if patch_op is not None:
        patch_op.fuse_into_timm(fused)
    rows = []
    for b in batches:
        images = torch.randn(b, 3, 224, 224, device="cuda", dtype=dtype)

        def mine():
            with attention_op.patched_sdpa():
                return fused(images)

        runs = {"evo": mine, "stock": lambda: stock_model(images), "patch only": lambda: fused(images)}
        if patch_op is None:
            runs.pop("patch only")
        with torch.no_grad():
            first = first_call(mine)
            difference = (mine().float() - stock_model(images).float()).abs().max().item()
            times = paired(runs, rounds=9, seconds=20e-3)
        rows.append(dict(batch=b, dtype=str(dtype), first_call_ms=round(first * 1e3, 1),
                         **{f"{name}_ms": round(t * 1e3, 3) for name, t in times.items()},
                         speedup=round(times["stock"] / times["evo"], 3), max_abs_difference=round(difference, 4)))
        print(rows[-1], flush=True)
    with torch.no_grad():
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(20):
            mine()
        profile.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
    print("\n".join(text.getvalue().splitlines()[-22:]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", help="a flashcore op for bf16 grouped heads (llm_bf16)")
    parser.add_argument("--attention-fp16", help="a flashcore op for fp16 (prefill)")
    parser.add_argument("--patch", help="a vit_gemm op (encoders)")
    parser.add_argument("--parts", default="host,sweep,llama,vit")
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    os.environ.setdefault("EVO_OP_CACHE", tempfile.mkdtemp(prefix="evo-ops-"))
    parts = set(options.parts.split(","))
    attention = load(options.attention) if options.attention else None
    fp16 = load(options.attention_fp16) if options.attention_fp16 else None
    patch = load(options.patch) if options.patch else None
    report = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d"))
    if "host" in parts and attention:
        report["host"] = host(attention)
        print(json.dumps({k: v for k, v in report["host"].items() if k != "profile"}), flush=True)
        print("\n".join(report["host"]["profile"]), flush=True)
    if "sweep" in parts:
        if attention:
            report["sweep_bf16"] = rows = attention_sweep(attention, LLAMA_SWEEP, torch.bfloat16)
            report["sweep_bf16_summary"] = summary(rows)
        if fp16:
            report["sweep_fp16"] = rows = attention_sweep(fp16, FP16_SWEEP, torch.float16)
            report["sweep_fp16_summary"] = summary(rows)
        if patch:
            report["sweep_patch"] = rows = patch_sweep(patch)
            report["sweep_patch_summary"] = summary(rows)
        for key in ("sweep_bf16_summary", "sweep_fp16_summary", "sweep_patch_summary"):
            if key in report:
                print(key, json.dumps(report[key]), flush=True)
    if "llama" in parts and attention:
        report["llama"] = llama(attention)
    if "vit" in parts and (fp16 or attention):
        report["vit_bf16"] = vit(attention or fp16, patch, dtype=torch.bfloat16)
        if fp16:
            report["vit_fp16"] = vit(fp16, None, dtype=torch.float16)
    if options.json:
        Path(options.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
