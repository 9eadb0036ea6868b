"""The strategy asked in a thread of its own, so that the search loop goes on collecting results and
handing built genomes to the evaluators while the strategy works out its next batch.

A surrogate's ask takes a few tenths of a second (the forest's fit, breeding and repairing candidates);
asked on the loop's own thread, every evaluator that finished meanwhile waited for it (two H200s were
busy 73% of the time, against 80% for one). The strategy is never used by two threads at once: what is
told while an ask runs waits for that ask's end (the ask then has heard a little less, as a batch asked
before the last one was scored has anyway).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from evo.strategies import Observation, Proposal, Strategy


class BackgroundAsk:
    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evo-ask")
        self._future: Future | None = None
        self._generation = 0
        self._untold: list[Observation] = []

    @property
    def asking(self) -> bool:
        return self._future is not None

    def start(self, n: int, generation: int) -> None:
        """Ask for ``n`` proposals of ``generation``, in the background."""
        if self._future is not None:
            raise RuntimeError("an ask is already under way")
        self._generation = generation
        self._future = self._pool.submit(self.strategy.ask, n)

    def collect(self) -> tuple[list[Proposal], int] | None:
        """The finished ask's proposals and their generation (its exception re-raised here), or None while it
        runs or when none was started; what was told meanwhile is told then."""
        if self._future is None or not self._future.done():
            return None
        future, self._future = self._future, None
        try:
            return future.result(), self._generation
        finally:
            self._tell_waiting()

    def tell(self, observations: Sequence[Observation]) -> None:
        if self._future is None:
            self.strategy.tell(observations)
        else:
            self._untold.extend(observations)

    def settle(self) -> None:
        """Wait for an ask under way and drop its proposals (the search is ending); tell what waited."""
        if self._future is not None:
            future, self._future = self._future, None
            future.exception()  # waits; an ask that failed as the search ends changes nothing
        self._tell_waiting()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _tell_waiting(self) -> None:
        if self._untold:
            waiting, self._untold = self._untold, []
            self.strategy.tell(waiting)
