"""The surrogate strategy's options replayed on the public tuning spaces, as the loop drives it: per space and
variant, the share of runs within 5% of the optimum after 50 and 100 evaluations, and the quartiles of the
evaluations needed (how the default kappa was chosen; docs/JOURNAL.md "Replay").

    python benchmarks/surrogate_variants.py --variants kappa=1,kappa=0.5 --seeds 30 --first-seed 30
    python benchmarks/surrogate_variants.py --spaces gemm_RTX3090 --variants "kappa=0.5 warmup=8" --seeds 10
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from evo.replay import kernel_tuner_space, summarize

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "replay_caches"
SPACES = ("convolution_RTX3090", "dedispersion_W7800", "gemm_RTX3090")


def options_of(variant: str) -> dict[str, float]:
    """``"kappa=0.5 warmup=8"`` -> {"kappa": 0.5, "warmup": 8}."""
    pairs = (item.split("=") for item in variant.split())
    return {name: (int(value) if value.isdigit() else value if value.isalpha() else float(value))
            for name, value in pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", default=",".join(SPACES), help="comma-separated cache names")
    parser.add_argument("--variants", default="kappa=1,kappa=0.5", help="comma-separated; each 'option=value ...'")
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=100)
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for name in args.spaces.split(","):
        space = kernel_tuner_space(SHARED / f"{name}.json.gz")
        for variant in args.variants.split(","):
            started = time.perf_counter()
            s = summarize(space, "surrogate", seeds=seeds, budget=args.budget, mode="loop",
                          budgets=(50, args.budget), options=options_of(variant))
            shares = " ".join(f"{b}: {share:.0%}" for b, share in s.success_5pct.items())
            print(f"{name} [{variant}] seeds {seeds.start}-{seeds.stop - 1}: within 5% after {shares}; "
                  f"evaluations to 5% (quartiles) {s.to_5pct} ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
