"""An Optuna sampler (TPE by default) driven through ask/tell.

The study lives in memory and is rebuilt from the store on resume: every finished evaluation
is added back as a completed (or failed) trial. Genomes Optuna suggests that break a
constraint, or that were already evaluated, are told to Optuna as failed trials and asked
again; if that keeps happening the last suggestion is repaired to the nearest valid genome.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Sequence

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from evo.strategies.base import Observation, Proposal, Strategy
from evo.kernel_genome import Genome, repair

SAMPLERS = ("tpe", "random", "nsgaii", "bruteforce")  # qmc and gp would need scipy
MAX_REJECTED = 20  # suggestions rejected in a row before repairing one


@dataclass(frozen=True)
class OptunaOptions:
    sampler: str = "tpe"
    n_startup_trials: int = 10  # random trials before TPE models the space

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown Optuna sampler {self.sampler!r}; choose one of {list(SAMPLERS)}")
        if self.n_startup_trials < 0:
            raise ValueError(f"n_startup_trials must be >= 0, got {self.n_startup_trials}")


class OptunaStrategy(Strategy):
    name = "optuna"
    Options = OptunaOptions

    def __init__(self, space, *, seed, population, options=None, niches=None, reads=None) -> None:
        super().__init__(space, seed=seed, population=population, options=options, niches=niches, reads=reads)
        optuna.logging.set_verbosity(logging.WARNING)
        self.distributions = {k.name: _distribution(k) for k in space.knobs}
        self.study = optuna.create_study(direction="minimize", sampler=self._sampler())
        self._trials: dict[str, optuna.trial.Trial] = {}  # genome id -> trial awaiting its result

    def _sampler(self) -> optuna.samplers.BaseSampler:
        name, seed = self.options.sampler, self.seed
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                              n_startup_trials=self.options.n_startup_trials)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "nsgaii":
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(2, self.population))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.BruteForceSampler(seed=seed)

    def ask(self, n: int) -> list[Proposal]:
        proposals: list[Proposal] = []
        while len(proposals) < n:
            proposal = self._ask_one()
            if proposal is None:
                break
            proposals.append(proposal)
        return proposals

    def _ask_one(self) -> Proposal | None:
        rejected = None
        for _ in range(MAX_REJECTED):
            trial = self.study.ask(self.distributions)
            genome = self.space.canonical(Genome.from_mapping(trial.params))
            if self.is_new(genome) and self.space.is_valid(genome):
                self.mark_asked(genome)
                self._trials[genome.id] = trial
                return Proposal(genome, "random" if self._is_startup() else "sampler")
            self.study.tell(trial, state=TrialState.FAIL)
            rejected = genome
        # Optuna keeps suggesting genomes we cannot use: take the nearest valid unseen one.
        fixed = repair(self.space, rejected, self.rng())
        if fixed is None or not self.is_new(fixed):
            fallback = self.random_proposals(1, self.rng())
            if not fallback:
                return None
            fixed = fallback[0].genome
        self.study.enqueue_trial(fixed.as_dict())
        trial = self.study.ask(self.distributions)
        self.mark_asked(fixed)
        self._trials[fixed.id] = trial
        return Proposal(fixed, "repair")

    def _is_startup(self) -> bool:
        complete = sum(1 for t in self.study.trials if t.state is TrialState.COMPLETE)
        return self.options.sampler != "tpe" or complete < self.options.n_startup_trials

    def tell(self, observations: Sequence[Observation]) -> None:
        super().tell(observations)
        for o in observations:
            trial = self._trials.pop(o.genome.id, None)
            if trial is not None:
                if o.fitness_s is None:
                    self.study.tell(trial, state=TrialState.FAIL)
                else:
                    self.study.tell(trial, o.fitness_s)
            else:  # evaluated outside this study (a seed, or a resumed run): add it as history
                self.study.add_trial(create_trial(
                    params=o.genome.as_dict(), distributions=self.distributions,
                    value=o.fitness_s, state=TrialState.FAIL if o.fitness_s is None else TrialState.COMPLETE))


def _distribution(knob):
    if knob.kind == "int_range" and len(knob.values) > 1:
        step = knob.values[1] - knob.values[0]
        return IntDistribution(knob.values[0], knob.values[-1], step=step)
    return CategoricalDistribution(knob.values)
