"""A run's memory of earlier runs (db.memory): measurements it need not take again, and the genomes it
may start from.

A genome about to be built is looked up by its measurement key (fitness.measurement_key); a match is
recorded at once as a reused evaluation (its message says so and names the evaluation it copies) and
costs no build and no GPU time. The key names the evaluator's GPU, driver and software, known once the
first evaluator has timed the anchor: until then, where this family left measurements before, the
run's genomes wait instead of being built (a fresh family's first batch never waits). A kernel that
meets a target still passes the hard gate, which re-verifies and re-times it on fresh inputs.
Workload runs measure each genome by a plan that depends on the run (db.memory keeps no plan): they
take every measurement afresh.
"""

from __future__ import annotations

import dataclasses

from evo.db import Memory, Store
from evo.fitness import EvalConfig, EvalResult, measurement_key
from evo.kernel_genome import Genome


class RunMemory:
    def __init__(self, store: Store, family, evaluation: EvalConfig, *, reuse: bool) -> None:
        """``reuse``: take stored measurements instead of measuring again (keys are stored either way,
        except in a workload run)."""
        self.family = family
        self.memory = Memory(store)
        self.evaluation = evaluation
        self.keyed = evaluation.workload is None
        self.reuse = reuse and self.keyed
        self.hardware: dict | None = None
        self.waiting: list[Genome] = []  # genomes held until the hardware is known
        self.reused = 0
        self._keys: dict[str, str] = {}
        self._hold = reuse and self.memory.family_measured(family.reference_key)

    def key(self, genome: Genome) -> str | None:
        """The genome's measurement key, once the hardware is known (None before, and in a workload run)."""
        if self.hardware is None or not self.keyed:
            return None
        if genome.id not in self._keys:
            self._keys[genome.id] = measurement_key(self.family, genome, self.evaluation, self.hardware,
                                                    self.family.mission_shape.name)
        return self._keys[genome.id]

    def know_hardware(self, hardware: dict) -> list[Genome]:
        """The evaluators' hardware is known: the genomes that waited for it, to be split now."""
        if self.hardware is None and hardware.get("anchor"):
            self.hardware = {k: v for k, v in hardware.items() if k != "anchor"}
        if self.hardware is None:
            return []
        waiting, self.waiting = self.waiting, []
        return waiting

    def split(self, genomes: list[Genome]) -> tuple[list[tuple[Genome, EvalResult]], list[Genome]]:
        """(reused: genome and its remembered verdict; to measure). Before the
        hardware is known, where this family was measured before, everything waits (neither list)."""
        if not self.reuse:
            return [], genomes
        if self.hardware is None:
            if self._hold:
                self.waiting.extend(genomes)
                return [], []
            return [], genomes
        reused, fresh = [], []
        for genome in genomes:
            found = self.memory.find(self.key(genome), genome.id)
            if found is None:
                fresh.append(genome)
                continue
            note = f"measurement reused from run {found.run_id} (evaluation {found.evaluation_id})"
            result = dataclasses.replace(found.result, message=f"{note}: {found.result.message}"
                                         if found.result.message else note)
            reused.append((genome, result))
        self.reused += len(reused)
        return reused, fresh

    def starting_genomes(self, limit: int, run_id: int) -> list[Genome]:
        """The best genomes earlier runs of the family found, valid in its space today (--warm-start)."""
        genomes = []
        for values in self.memory.best_genomes(self.family.reference_key, limit, exclude_run=run_id):
            try:
                genomes.append(self.family.space.check(self.family.space.genome(values)))
            except ValueError:  # a knob changed since: that genome is no longer one of this space
                continue
        return genomes
