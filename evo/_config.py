"""SearchConfig: everything that defines a search, stored with its run so that it can resume."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from fitness import Target


@dataclass(frozen=True)
class SearchConfig:
    """Everything that defines a search; stored with the run so that it can resume."""

    family: str
    mission: str | None = None  # the shape whose time is the fitness (default: the family's own mission shape)
    strategy: str = "surrogate"  # evolution guided by a cost model: chosen by replay (docs/BENCHMARKS.md)
    strategy_options: dict = field(default_factory=dict)
    target: str | None = None
    budget: int | None = 100  # evaluations, seeds included
    time_budget_s: float | None = None
    population: int = 8
    seed: int = 0
    trials: int = 3
    cold_cache: bool = False  # time every run after flushing the last-level cache (operands from memory)
    build_timeout_s: float = 120.0
    eval_timeout_s: float = 300.0  # the watchdog's hard cap on one evaluation
    watchdog_factor: float = 20.0  # the watchdog: this many times the evaluator's anchor pass (at least 5 s)
    cache_dir: str | None = None
    gate_rounds: int = 10  # the hard gate: re-verify + re-time this many times before the target counts
    workload: dict | None = None  # a workload's shapes and weights (Workload.to_dict()): tune for all of them
    reuse: bool = True  # take earlier runs' measurements of the same thing instead of measuring again
    warm_start: bool = False  # start from the best genomes earlier runs of the family found

    def __post_init__(self) -> None:
        positive = {"population": self.population, "trials": self.trials,
                    "build_timeout_s": self.build_timeout_s, "eval_timeout_s": self.eval_timeout_s,
                    "watchdog_factor": self.watchdog_factor}
        if self.budget is not None:
            positive["budget"] = self.budget
        if self.time_budget_s is not None:
            positive["time_budget_s"] = self.time_budget_s
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.budget is None and self.time_budget_s is None and self.target is None:
            raise ValueError("a search needs a budget, a time budget or a target to stop at")
        if self.target is not None:
            Target.parse(self.target)
        if not isinstance(self.gate_rounds, int) or isinstance(self.gate_rounds, bool) or self.gate_rounds < 0:
            raise ValueError(f"gate_rounds must be a whole number >= 0, got {self.gate_rounds!r}")
        for name in ("cold_cache", "reuse", "warm_start"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.mission is not None:
            if not isinstance(self.mission, str) or not self.mission or "@" in self.mission:
                raise ValueError(f"mission must be the name of one of the family's shapes, got {self.mission!r}")
            if "@" in self.family:
                raise ValueError(f"family {self.family!r} already names its mission shape; drop mission "
                                 f"{self.mission!r} or the @ suffix")
        if self.workload is not None:
            if not isinstance(self.workload, dict):
                raise ValueError(f"workload must be a table of shapes, got {self.workload!r}")
            if self.mission is not None or "@" in self.family:
                raise ValueError("a workload search tunes for every shape of its workload: drop --mission "
                                 "(or the family's @SHAPE)")

    @property
    def family_reference(self) -> str:
        """What ``get_family`` takes: the family, retargeted to ``mission`` when one is set."""
        return self.family if self.mission is None else f"{self.family}@{self.mission}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "SearchConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})
