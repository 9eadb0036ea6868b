"""Find kernel families: the built-in ones (``seeds/<name>/spec.py`` defining FAMILY) or any
importable ``module:attribute`` reference, either one optionally retargeted with ``@SHAPE``: the
same family whose fitness (the mission) is its time at SHAPE, another of its shapes."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import pkgutil
from functools import lru_cache

from seeds._family import KernelFamily


def family_names() -> list[str]:
    """Names of the built-in families (sub-packages of ``seeds`` that have a ``spec`` module)."""
    import seeds

    names = []
    for info in pkgutil.iter_modules(seeds.__path__):
        if info.ispkg and not info.name.startswith("_"):
            if importlib.util.find_spec(f"seeds.{info.name}.spec") is not None:
                names.append(info.name)
    return sorted(names)


@lru_cache(maxsize=None)
def get_family(reference: str) -> KernelFamily:
    """The family named ``reference``: a built-in name, or ``package.module:ATTRIBUTE``, with an
    optional ``@SHAPE`` suffix that makes SHAPE (one of the family's shapes) its mission shape.

    Raises ``ValueError`` with the known names (families, or the family's shapes) when nothing matches.
    """
    if not isinstance(reference, str) or not reference:
        raise ValueError("family must be a non-empty name")
    if "@" in reference:
        base_reference, _, mission = reference.partition("@")
        return _retargeted(get_family(base_reference), mission, reference)
    if ":" in reference:
        module_name, _, attribute = reference.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"family {reference!r}: cannot import {module_name!r} ({exc})") from None
        family = getattr(module, attribute, None)
    else:
        if reference not in family_names():
            raise ValueError(f"unknown family {reference!r}; known families: {family_names()}")
        family = importlib.import_module(f"seeds.{reference}.spec").FAMILY
    if not isinstance(family, KernelFamily):
        raise ValueError(f"family {reference!r} is not a KernelFamily instance")
    family.lookup_name = reference
    return family


def _retargeted(family: KernelFamily, mission: str, reference: str) -> KernelFamily:
    """A copy of ``family`` whose mission shape is ``mission`` (the family object itself is shared
    by every search of its default mission, so it is left as it is)."""
    names = [s.name for s in family.shapes]
    if mission not in names:
        raise ValueError(f"family {family.name!r} has no shape {mission!r}; its shapes: {', '.join(names)}")
    retargeted = copy.copy(family)
    retargeted.shapes = tuple(dataclasses.replace(s, mission=s.name == mission) for s in family.shapes)
    retargeted.lookup_name = reference
    return retargeted
