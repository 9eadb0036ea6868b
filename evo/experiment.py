"""Experiment files (TOML) and the search settings they share with the command line.

    [search]
    family = "cpu_gemm"
    mission = "tall"            # the shape whose time is the fitness (default: the family's mission shape)
    strategy = "surrogate"      # surrogate | portfolio | evolution | random | optuna (default: the family's)
    target = "0.8x"             # 40us, 2ms, 1.5s, or a ratio to the anchor: 0.5x
    budget = 40                 # evaluations, seeds included
    time_budget = "5m"          # 90s, 10m, 1h
    population = 8
    seed = 0
    trials = 3                  # fresh random inputs per shape when verifying
    cold_cache = false          # time every run after flushing the L2 / last-level cache
    build_timeout = "120s"
    eval_timeout = "300s"       # the watchdog's hard cap on one candidate's verify + timing
    watchdog_factor = 20        # below the cap: this many times the evaluator's pass over the anchor
    gate_rounds = 10            # hard gate before a target counts: re-verify + re-time N times (0: off)
    reuse = true                # take earlier runs' measurements of the same thing instead of measuring again
    warm_start = false          # start from the best genomes earlier runs of the family found

    [strategy]                  # options of the chosen strategy, e.g. elite = 2, sampler = "tpe"

    [workload]                  # tune for every shape of a workload (seeds/_workload.py): a built-in
    name = "small"              # one by name, or shapes with weights:
    shapes = [ { name = "a", m = 64, n = 256, k = 256, weight = 2 }, { m = 96, n = 96, k = 512 } ]
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*$")
_SCALE = {"ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}

from evo._config import SETTINGS  # noqa: E402 - the keys below are made from the declared settings

SEARCH_KEYS = {s.key: s.kind for s in SETTINGS if s.key}  # [search] key -> the TOML type(s) it takes
DURATION_KEYS = {s.key: s.field for s in SETTINGS if s.key and s.duration}  # "10m" keys -> seconds fields


def parse_duration(value: Any, what: str) -> float:
    """Seconds from ``90``, ``"90s"``, ``"10m"``, ``"1h"``, ``"500ms"``."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a duration like 90s, 10m or 1h, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{what} {value!r} is not a duration like 90s, 10m or 1h")
        seconds = float(match.group(1)) * _SCALE[match.group(2)]
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return seconds


def _is_relative_path(reference: str) -> bool:
    from evo.seeds import is_path_reference

    location = reference.split("@", 1)[0]
    return is_path_reference(location) and not location.startswith(("/", "~"))


def load_experiment(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(search settings as SearchConfig fields, strategy options) from a TOML file; a [workload] table
    comes back as settings["workload"], unchecked.

    Any problem — missing file, bad TOML, unknown section or key, wrong type — is a ValueError
    naming the file and the key.
    """
    from evo.seeds import read_toml

    path = Path(path)
    data = read_toml(path, f"experiment file {str(path)!r}")
    unknown = sorted(set(data) - {"search", "strategy", "workload"})
    if unknown:
        raise ValueError(f"experiment file {str(path)!r}: unknown section(s) {unknown}; expected [search], "
                         f"[strategy], [workload]")
    search = data.get("search", {})
    options = data.get("strategy", {})
    if not isinstance(search, dict) or not isinstance(options, dict):
        raise ValueError(f"experiment file {str(path)!r}: [search] and [strategy] must be tables")
    settings: dict[str, Any] = {}
    for key, value in search.items():
        if key not in SEARCH_KEYS:
            raise ValueError(f"experiment file {str(path)!r}: unknown key search.{key}; known: {sorted(SEARCH_KEYS)}")
        expected = SEARCH_KEYS[key]
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise ValueError(f"experiment file {str(path)!r}: search.{key} has the wrong type ({value!r})")
        if key in DURATION_KEYS:
            settings[DURATION_KEYS[key]] = parse_duration(value, f"search.{key}")
        elif key == "family" and _is_relative_path(value):  # a family folder beside the file, wherever run from
            settings[key] = str((path.resolve().parent / value).resolve())
        else:
            settings[key] = value
    if "workload" in data:  # checked against the family once it is known (seeds.parse_workload)
        if not isinstance(data["workload"], dict):
            raise ValueError(f"experiment file {str(path)!r}: [workload] must be a table")
        settings["workload"] = data["workload"]
    return settings, dict(options)
