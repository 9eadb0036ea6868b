"""SearchConfig: everything that defines a search, stored with its run so that it can resume."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from evo.fitness import Target

DEFAULT_FAMILY = "flashcore"  # the product's headline; experiments/flashcore.toml spells out its settings
MAX_COUNT = 2**31 - 1  # the most evaluations (a budget, a population, trials) the store's integer columns hold
MAX_SEED = 2**63 - 1  # seeds the strategies (NumPy, Optuna) and the store take
MAX_SECONDS = 10 * 365 * 86400.0  # a time or timeout beyond ten years is a typo



def _setting(default=dataclasses.MISSING, *, help: str, key: str | None = None, flag: str | None = None,
             kind: Any = None, duration: bool = False, default_factory=dataclasses.MISSING):
    """A SearchConfig field declared once: its experiment-file key (``key``; None: none), its `evo search` flag
    (``flag``: "count", "positive", "int", "text", "bool", "duration"; None: no flag), the TOML type(s) its key
    takes (``kind``), whether the key is a duration ("10m") stored in seconds, and its one line of help."""
    metadata = {"help": help, "key": key, "flag": flag, "kind": kind, "duration": duration}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(frozen=True)
class SearchConfig:
    """Everything that defines a search; stored with the run so that it can resume. Each field says once
    where else it appears (``_setting``): the experiment file's [search] keys and the `evo search` flags are
    made from these declarations (``SETTINGS``); docs/USING.md's flag reference is checked against the flags."""

    family: str = _setting(help=f"the kernel family (`evo families`; default {DEFAULT_FAMILY})", key="family",
                           flag="text", kind=str)
    mission: str | None = _setting(None, help="the shape whose time is the fitness (default: the family's own)",
                                   key="mission", flag="text", kind=str)
    strategy: str | None = _setting(None, help="surrogate (evolution guided by a cost model), portfolio (each batch "
                                    "shared between the surrogate and Optuna's TPE), evolution, random or optuna "
                                    "(default: the family's: surrogate for the built-in families, portfolio for a "
                                    "kernel of your own)", key="strategy", flag="text", kind=str)
    strategy_options: dict = field(default_factory=dict)  # the experiment file's [strategy] table; --sampler
    target: str | None = _setting(None, help="stop when a kernel is this fast: 40us, 2ms, or 0.5x the anchor",
                                  key="target", flag="text", kind=str)
    budget: int | None = _setting(100, help="evaluations, seeds included", key="budget", flag="positive", kind=int)
    time_budget_s: float | None = _setting(None, help="wall-clock limit: 90s, 10m, 1h", key="time_budget",
                                           flag="duration", kind=(str, int, float), duration=True)
    population: int = _setting(8, help="genomes per generation", key="population", flag="positive", kind=int)
    seed: int = _setting(0, help="the strategy's random seed", key="seed", flag="int", kind=int)
    trials: int = _setting(3, help="fresh random inputs per shape when verifying", key="trials", flag="positive",
                           kind=int)
    cold_cache: bool = _setting(False, help="time every run after flushing the last-level cache (operands from "
                                "memory)", key="cold_cache", flag="bool", kind=bool)
    build_timeout_s: float = _setting(120.0, help="a compile's limit", key="build_timeout", kind=(str, int, float),
                                      duration=True)
    eval_timeout_s: float = _setting(300.0, help="the watchdog's hard cap on one evaluation", key="eval_timeout",
                                     kind=(str, int, float), duration=True)
    watchdog_factor: float = _setting(20.0, help="the watchdog: this many times the evaluator's anchor pass",
                                      key="watchdog_factor", kind=(int, float))
    cache_dir: str | None = _setting(None, help="the build cache", key="cache_dir", kind=str)
    gate_rounds: int = _setting(10, help="hard gate before a target counts: re-verify and re-time the kernel this "
                                "many times, all within target (0: off)", key="gate_rounds", flag="int", kind=int)
    workload: dict | None = None  # a workload's shapes and weights (Workload.to_dict()): --workload, [workload]
    reuse: bool = _setting(True, help="take earlier runs' measurements of the same kernel instead of measuring again",
                           key="reuse", flag="bool", kind=bool)
    warm_start: bool = _setting(False, help="start from the best genomes earlier runs of the family found",
                                key="warm_start", flag="bool", kind=bool)

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
            limit = MAX_SECONDS if name.endswith(("_s", "_factor")) else MAX_COUNT
            if value > limit:
                raise ValueError(f"{name} must be at most {limit:.0f}, got {_short(value)}")
        if self.budget is None and self.time_budget_s is None and self.target is None:
            raise ValueError("a search needs a budget, a time budget or a target to stop at")
        if self.target is not None:
            Target.parse(self.target)
        if not isinstance(self.gate_rounds, int) or isinstance(self.gate_rounds, bool) or self.gate_rounds < 0:
            raise ValueError(f"gate_rounds must be a whole number >= 0, got {self.gate_rounds!r}")
        for name in ("cold_cache", "reuse", "warm_start"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"seed must be a whole number from 0 to {MAX_SEED}, got {_short(self.seed)}")
        if self.gate_rounds > 1000:
            raise ValueError(f"gate_rounds must be at most 1000, got {self.gate_rounds!r}")
        if self.cache_dir is not None:
            _writable_folder(self.cache_dir, "cache_dir")
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

    def with_strategy_of(self, family) -> "SearchConfig":
        """This config, its strategy the family's own (``default_strategy``) where it names none."""
        return self if self.strategy is not None else dataclasses.replace(self, strategy=family.default_strategy)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "SearchConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def _short(value: Any, limit: int = 60) -> str:
    """A value as an error message echoes it: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _writable_folder(path: Any, name: str) -> None:
    """A folder evo can create (if need be) and write in, or ValueError naming ``name``."""
    import contextlib
    import os
    import tempfile
    from pathlib import Path

    if not isinstance(path, str) or not path:
        raise ValueError(f"{name} must be a folder's path, got {_short(path)}")
    folder = Path(path).expanduser().absolute()
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)  # tried, then taken back: nothing is left where a search is refused
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".evo-write-test-"):
            pass
        writable = os.access(folder, os.W_OK)
    except OSError as exc:
        raise ValueError(f"{name} {_short(path)} cannot be written: {exc.strerror or exc}") from None
    finally:
        for created in missing:
            with contextlib.suppress(OSError):
                created.rmdir()
    if not writable:
        raise ValueError(f"{name} {_short(path)} cannot be written")


@dataclass(frozen=True)
class Setting:
    """One declared SearchConfig field (``_setting``), as the experiment file and the command line see it."""

    field: str
    key: str | None
    flag: str | None  # how `evo search` parses it (None: no flag)
    kind: Any
    duration: bool
    help: str

    @property
    def option(self) -> str:
        return "--" + (self.key or self.field).replace("_", "-")


SETTINGS = tuple(Setting(f.name, f.metadata["key"], f.metadata["flag"], f.metadata["kind"], f.metadata["duration"],
                         f.metadata["help"]) for f in dataclasses.fields(SearchConfig) if "help" in f.metadata)
