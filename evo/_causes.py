"""Why evaluations failed, told: each distinct cause (a status and its message with the numbers left out: "max
abs error 7.4" and "max abs error 0.3" are one cause) with how often and a genome that shows it. The live
line, the summary and `evo show` print the first few; the loop stops a run whose first evaluations all fail
the same way (EARLY_FAILURES), since every other genome of the family will most likely fail so too."""

from __future__ import annotations

import re
from dataclasses import dataclass

EARLY_FAILURES = 8  # the first this many evaluations (or the whole budget, if smaller) failing one way end a run
SHOWN = 3  # distinct causes printed
_NUMBERS = re.compile(r"0x[0-9a-f]+|[0-9a-f]{16,}|\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.IGNORECASE)
NOT_A_FAULT = frozenset({"ok", "unverified"})  # unverified: no GPU here can run it (sm_100a code), by design


def cause_key(status: str, message: str | None) -> str:
    """What makes two failures the same failure: the status, and the message without its numbers."""
    return f"{status}: {_NUMBERS.sub('#', (message or '').strip().lower())}"


@dataclass
class Cause:
    status: str
    message: str
    genome_id: str  # the first genome that failed this way
    count: int = 1

    def text(self, width: int = 160) -> str:
        message = " ".join(self.message.split())
        message = message if len(message) <= width else message[: width - 3] + "..."
        return f"{self.status.replace('_', ' ')} x{self.count}: {message or '-'} (e.g. genome {self.genome_id})"


class Causes:
    """The distinct failure causes of a run, in the order they first appeared."""

    def __init__(self) -> None:
        self._by_key: dict[str, Cause] = {}
        self.evaluations = 0  # every evaluation counted, failed or not
        self.faults = 0  # those that failed (not ``NOT_A_FAULT``)

    def add(self, status: str, message: str | None, genome_id: str) -> None:
        self.evaluations += 1
        if status in NOT_A_FAULT:
            return
        self.faults += 1
        key = cause_key(status, message)
        if key in self._by_key:
            self._by_key[key].count += 1
        else:
            self._by_key[key] = Cause(status, message or "", genome_id)

    def first(self, n: int = SHOWN) -> list[Cause]:
        return list(self._by_key.values())[:n]

    def text(self, n: int = SHOWN) -> str:
        causes = self.first(n)
        more = len(self._by_key) - len(causes)
        return "; ".join(c.text() for c in causes) + (f"; and {more} more" if more > 0 else "")

    def all_one_way(self, budget: int | None) -> Cause | None:
        """The one cause every evaluation so far failed by, once the first EARLY_FAILURES (or the whole budget)
        all did; else None."""
        enough = min(EARLY_FAILURES, budget or EARLY_FAILURES)
        if self.evaluations < enough or self.faults != self.evaluations or len(self._by_key) != 1:
            return None
        return next(iter(self._by_key.values()))
