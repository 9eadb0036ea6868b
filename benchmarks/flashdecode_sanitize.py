"""Launch flashdecode's ways of merging splits once per shape and check each output (GPU); for compute-sanitizer.

    compute-sanitizer --tool memcheck --report-api-errors no --kernel-name kns=flashdecode \
        python benchmarks/flashdecode_sanitize.py          # also --tool racecheck, --tool synccheck

The seed with each combine (a combine kernel, one launched as a programmatic dependent, each tile's last block
on tickets), many short splits (balanced policy, 64 keys at least), on a ragged fp16 D 64 cache, causal with 4
query tokens, 35 rows (three row tiles, the last partial) and a 2048-key cache in 32 splits.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from evo.fitness import BuildConfig, Builder, Status  # noqa: E402
from evo.seeds import get_family, shape  # noqa: E402

F = get_family("flashdecode")
SHAPES = [shape("ragged_fp16_d64", b=2, h=4, h_kv=4, q=1, kv=300, d=64, causal=0, bf16=0),
          shape("causal_q4", b=1, h=8, h_kv=2, q=4, kv=777, d=128, causal=1, bf16=1),
          shape("rows_35", b=1, h=28, h_kv=4, q=5, kv=501, d=128, causal=0, bf16=1),
          shape("split_many", b=1, h=8, h_kv=1, q=1, kv=2048, d=128, causal=0, bf16=1)]
builder = Builder(BuildConfig(Path(tempfile.mkdtemp())))
seed = F.seed_genomes[0].as_dict()
for combine in ("kernel", "overlapped_kernel", "last_block"):
    genome = F.space.genome(dict(seed, combine=combine, split_waves=8, min_split_keys=64, split_policy="balanced"))
    build = builder.build(genome.id, F.build_recipe(genome))
    assert build.status is Status.OK, build.message
    path = Path(tempfile.mkdtemp()) / "k.cubin"
    path.write_bytes(build.artifact)
    loaded = F.load(path, genome)
    for s in SHAPES:
        inputs = F.make_inputs(s, torch.Generator(device="cuda").manual_seed(1))
        out = F.make_output(s).fill_(float("nan"))
        F.launch(loaded, s, inputs, out)
        torch.cuda.synchronize()
        err = (out.float() - F.reference(s, inputs)).abs().max().item()
        print(combine, s.name, "max err", f"{err:.4f}", flush=True)
