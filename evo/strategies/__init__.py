"""Search strategies behind one ask/tell interface."""

from evo.strategies.base import Observation, Proposal, Strategy
from evo.strategies.evolution import EvolutionOptions, EvolutionStrategy
from evo.strategies.optuna_sampler import SAMPLERS, OptunaOptions, OptunaStrategy
from evo.strategies.portfolio import PortfolioOptions, PortfolioStrategy
from evo.strategies.random_search import RandomStrategy
from evo.strategies.surrogate import SurrogateOptions, SurrogateStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (EvolutionStrategy, SurrogateStrategy, RandomStrategy, OptunaStrategy, PortfolioStrategy)
}


def make_strategy(name: str, space, *, seed: int, population: int, options=None, niches=None, reads=None) -> Strategy:
    """A strategy by name; ``ValueError`` names an unknown strategy or option. ``niches``: a workload's
    shapes and weights; ``reads``: the knobs the fitness depends on (None: all)."""
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted(STRATEGIES)}") from None
    return cls(space, seed=seed, population=population, options=options, niches=niches, reads=reads)


__all__ = [
    "EvolutionOptions",
    "EvolutionStrategy",
    "Observation",
    "OptunaOptions",
    "OptunaStrategy",
    "PortfolioOptions",
    "PortfolioStrategy",
    "Proposal",
    "RandomStrategy",
    "SAMPLERS",
    "STRATEGIES",
    "Strategy",
    "SurrogateOptions",
    "SurrogateStrategy",
    "make_strategy",
]
