"""Find kernel families, by any of three kinds of reference, optionally retargeted with ``@SHAPE`` (the same
family whose fitness, the mission, is its time at SHAPE, another of its shapes):

- a name: a built-in family (``seeds/<name>/spec.py`` defining FAMILY), or one an installed package
  declares in the ``evo.families`` entry-point group (``name = "package.module:ATTRIBUTE"``);
- a path: a family folder (its ``spec.py`` defines FAMILY) or a Python file defining FAMILY, with an
  optional ``:ATTRIBUTE``; the folder need not be importable (no PYTHONPATH);
- ``package.module:ATTRIBUTE``: any importable module.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import pkgutil
import sys
from functools import lru_cache
from pathlib import Path

from evo.seeds._family import KernelFamily

ENTRY_POINT_GROUP = "evo.families"
SPEC_FILE = "spec.py"  # a family folder's spec


def family_names() -> list[str]:
    """Names of the built-in families (sub-packages of ``seeds`` that have a ``spec`` module)."""
    import evo.seeds as seeds

    names = []
    for info in pkgutil.iter_modules(seeds.__path__):
        if info.ispkg and not info.name.startswith("_"):
            if importlib.util.find_spec(f"evo.seeds.{info.name}.spec") is not None:
                names.append(info.name)
    return sorted(names)


def installed_families() -> dict[str, str]:
    """Families that installed packages declare: entry-point name -> ``module:attribute``."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def installed_by_name(name: str) -> str | None:
    """The ``module:ATTRIBUTE`` of the one installed family whose own name is ``name`` (its entry point may be
    called otherwise), None where none is; two of one name (or one named as a built-in) are refused."""
    targets = []
    for key, target in sorted(installed_families().items()):
        try:
            if getattr(get_family(target), "name", None) == name:
                targets.append(f"{key} = {target}")
        except ValueError:
            continue  # a broken one is reported where it is named
    if len(targets) > 1 or (targets and name in family_names()):
        also = " and the built-in family" if name in family_names() else ""
        raise ValueError(f"family name {name!r} is taken by {len(targets)} installed families ({'; '.join(targets)})"
                         f"{also}: name the one you mean as module:ATTRIBUTE")
    return targets[0].split(" = ", 1)[1] if targets else None


def family_folders(directory: Path) -> list[Path]:
    """The family folders in ``directory`` (those with a spec.py), for ``evo families``."""
    try:
        return sorted(p for p in directory.iterdir() if p.is_dir() and (p / SPEC_FILE).is_file())
    except OSError:
        return []


def is_path_reference(reference: str) -> bool:
    """A reference that names a file or folder: it starts with ``.``, ``/`` or ``~``, holds a ``/``, or
    ends in ``.py`` (before any ``:ATTRIBUTE``)."""
    location, _ = _split_attribute(reference)
    return location.startswith((".", "/", "~")) or "/" in location or location.endswith(".py")


def _split_attribute(reference: str) -> tuple[str, str]:
    """``LOCATION:ATTRIBUTE`` -> (location, attribute); FAMILY where no attribute is named."""
    head, sep, tail = reference.rpartition(":")
    return (head, tail) if sep and head and tail.isidentifier() else (reference, "FAMILY")


def get_family(reference: str) -> KernelFamily:
    """The family named ``reference`` (a name, a path, or ``package.module:ATTRIBUTE``: see the module), with an
    optional ``@SHAPE`` suffix that makes SHAPE (one of the family's shapes) its mission shape.

    Raises ``ValueError`` with the known names (families, or the family's shapes) when nothing matches.
    """
    if not isinstance(reference, str) or not reference:
        raise ValueError("family must be a non-empty name")
    return _cached_family(_absolute(reference))


def _absolute(reference: str) -> str:
    """A path reference made absolute (the same relative path names another family in another folder)."""
    base, at, mission = reference.rpartition("@") if "@" in reference else (reference, "", "")
    if not is_path_reference(base):
        return reference
    location, attribute = _split_attribute(base)
    absolute = str(Path(location).expanduser().resolve()) + ("" if attribute == "FAMILY" else f":{attribute}")
    return absolute + (f"@{mission}" if at else "")


@lru_cache(maxsize=None)
def _cached_family(reference: str) -> KernelFamily:
    if "@" in reference:
        base_reference, _, mission = reference.rpartition("@")
        base = get_family(base_reference)
        return _retargeted(base, mission, f"{base.reference_key}@{mission}")
    if is_path_reference(reference):
        family, reference = _from_path(reference)
    elif ":" in reference:
        module_name, _, attribute = reference.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"family {reference!r}: cannot import {module_name!r} ({exc})") from None
        family = getattr(module, attribute, None)
    elif reference in family_names():
        family = importlib.import_module(f"evo.seeds.{reference}.spec").FAMILY
    elif reference in installed_families():
        return get_family(installed_families()[reference])
    elif (target := installed_by_name(reference)) is not None:
        return get_family(target)
    else:
        known = family_names() + sorted(installed_families())
        raise ValueError(f"unknown family {reference!r}; known families: {known} (or a family folder's path, "
                         f"e.g. ./myfamily, or package.module:ATTRIBUTE)")
    if not isinstance(family, KernelFamily):
        raise ValueError(f"family {reference!r} is not a KernelFamily instance")
    family.check_definition()
    family.lookup_name = reference
    return family


def _retargeted(family: KernelFamily, mission: str, reference: str) -> KernelFamily:
    """A copy of ``family`` whose mission shape is ``mission``: one of its shapes, or one of its workloads'
    shapes, which then joins its shapes (the family object itself is shared by every search of its
    default mission, so it is left as it is)."""
    names = [s.name for s in family.shapes]
    shapes = family.shapes
    if mission not in names:  # a shape of one of its workloads joins the shapes every kernel is verified on
        extra = next((s for w in family.workloads for s in w.shapes if s.name == mission), None)
        if extra is None:
            workload_names = sorted({s.name for w in family.workloads for s in w.shapes})
            raise ValueError(f"family {family.name!r} has no shape {mission!r}; its shapes: {', '.join(names)}"
                             + (f"; its workloads' shapes: {', '.join(workload_names)}" if workload_names else ""))
        shapes = shapes + (extra,)
    retargeted = copy.copy(family)
    retargeted.shapes = tuple(dataclasses.replace(s, mission=s.name == mission) for s in shapes)
    retargeted.lookup_name = reference
    return retargeted


def _from_path(reference: str) -> tuple[object, str]:
    """The object a path reference names, and the reference made absolute (what a Ray worker, whose
    working directory may differ, passes back to ``get_family``)."""
    location, attribute = _split_attribute(reference)
    path = Path(location)  # absolute already (see _absolute)
    if not path.exists() and (shipped := _shipped(path)) is not None:
        path = shipped  # a Ray worker on another node: the folder came in the runtime environment
    spec_file = path / SPEC_FILE if path.is_dir() else path
    if not spec_file.is_file():
        what = f"no {SPEC_FILE} in the folder" if path.is_dir() else "no such file or folder"
        raise ValueError(f"family {reference!r}: {what} ({spec_file})")
    if spec_file.suffix != ".py":
        raise ValueError(f"family {reference!r}: {spec_file.name} is not a family (a folder with a {SPEC_FILE}, or a "
                         f"Python file that defines FAMILY)")
    module_name = "evo_family_" + hashlib.sha1(str(spec_file).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, spec_file)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module  # before it runs: dataclasses and pickling look it up there
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            where = _where(exc, spec_file)
            if isinstance(exc, ValueError) and str(exc).startswith("family "):  # the family API's own word on it
                raise ValueError(f"{exc} ({spec_file}{where})") from None
            raise ValueError(f"family {reference!r}: {spec_file.name} raised {type(exc).__name__}: {exc}"
                             f"{' (' + where.strip() + ')' if where else ''}") from None
    named = spec_file.parent if spec_file.name == SPEC_FILE else spec_file  # a folder, or its spec.py: one name
    canonical = str(named) + ("" if attribute == "FAMILY" else f":{attribute}")
    family = getattr(module, attribute, None)
    if family is None:
        raise ValueError(f"family {reference!r}: {spec_file} defines no {attribute}")
    return family, canonical


def _where(exc: BaseException, spec_file: Path) -> str:
    """" line N" of the spec file where ``exc`` was raised, or ""."""
    import traceback

    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == spec_file]
    return f" line {lines[-1]}" if lines else ""


def family_folder(family: KernelFamily) -> Path | None:
    """The folder of a family found by a folder's path (what a cluster's workers are sent), else None."""
    reference = family.reference_key.rpartition("@")[0] if "@" in family.reference_key else family.reference_key
    if not is_path_reference(reference):
        return None
    location, _ = _split_attribute(reference)
    path = Path(location)
    folder = path if path.is_dir() else path.parent if path.name == SPEC_FILE else None
    return folder if folder is not None and folder.name.isidentifier() else None


def _shipped(path: Path) -> Path | None:
    """The copy of a family folder that Ray's runtime environment put on this node's import path."""
    name = path.name if path.name != SPEC_FILE else path.parent.name
    if not name.isidentifier():
        return None
    for entry in sys.path:
        candidate = Path(entry) / name
        if (candidate / SPEC_FILE).is_file():
            return candidate
    return None


def family_file(family: KernelFamily) -> Path | None:
    """The file that defines ``family`` (a folder's spec.py, a module's file, a built-in's spec), for messages."""
    reference = family.reference_key.rpartition("@")[0] if "@" in family.reference_key else family.reference_key
    location, _ = _split_attribute(reference)
    if is_path_reference(reference):
        path = Path(location)
        return path / SPEC_FILE if path.is_dir() else path
    module = location if ":" in reference else f"evo.seeds.{reference}.spec"
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(found.origin) if found is not None and found.origin else None
