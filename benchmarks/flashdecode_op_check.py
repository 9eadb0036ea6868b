"""The exported decode op as users call it: off-workload shapes, gradients, torch.compile(fullgraph=True) (GPU).

    evo search --family flashdecode --workload decode --budget 16 && evo export 1 --out op
    python benchmarks/flashdecode_op_check.py op
"""
import sys, torch
sys.path.insert(0, sys.argv[1])
import flashdecode_decode as op
torch.manual_seed(0)
F = torch.nn.functional.scaled_dot_product_attention
for b, h, hkv, q, kv, causal in ((3, 32, 8, 1, 5000, False), (2, 28, 4, 2, 777, False), (1, 8, 1, 3, 12345, True), (5, 16, 16, 1, 100, False)):
    x = [torch.randn(b, h, q, 128, device="cuda", dtype=torch.bfloat16)] + [torch.randn(b, hkv, kv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    got = op.attention(*x, causal=causal)
    ref = F(*[t.float() for t in x], is_causal=causal, enable_gqa=hkv != h)
    print(f"b{b} h{h}/{hkv} q{q} kv{kv} causal{int(causal)}: max err {(got.float()-ref).abs().max().item():.4f}; runs {op.choose(dict(b=b,h=h,h_kv=hkv,q=q,kv=kv,d=128,causal=int(causal),bf16=1))}", flush=True)
x = [t.requires_grad_() for t in (torch.randn(2, 32, 1, 128, device="cuda"), torch.randn(2, 8, 3000, 128, device="cuda"), torch.randn(2, 8, 3000, 128, device="cuda"))]
xb = [t.detach().to(torch.bfloat16).requires_grad_() for t in x]
out = op.attention(*xb)
out.float().square().sum().backward()
yb = [t.detach().clone().requires_grad_() for t in xb]
F(*yb, enable_gqa=True).float().square().sum().backward()
print("grads max diff", max((a.grad.float() - b.grad.float()).abs().max().item() for a, b in zip(xb, yb)), flush=True)
f = torch.compile(lambda q, k, v: op.attention(q, k, v) * 2, fullgraph=True)
q, k, v = (t.detach() for t in xb)
print("compiled max err", (f(q, k, v).float() - 2 * F(q.float(), k.float(), v.float(), enable_gqa=True)).abs().max().item())
