"""`evo doctor`: what this machine (and, with --ray-address, a Ray cluster) has for evo."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.table import Table

from evo.db import Database, SchemaError, resolve_url
from evo.fitness import prepare_to_join


def cmd_doctor(args, console: Console) -> int:
    from evo.fitness.build import compiler_command, compiler_version

    table = Table(title="evo doctor")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail")
    essential_ok = True

    def row(name, ok, detail, essential=False):
        nonlocal essential_ok
        essential_ok &= ok or not essential
        table.add_row(name, "[green]ok[/]" if ok else ("[red]missing[/]" if essential else "[yellow]absent[/]"), detail)

    for label, compiler, essential in (("C++ compiler", "c++", True), ("nvcc", "nvcc", False)):
        command = compiler_command(compiler)
        path = shutil.which(command)
        version = (compiler_version(compiler) or "") if path else ""
        row(label, bool(path), f"{path} {version}" if path else f"{command} not on PATH", essential)
    import torch

    gpu = torch.cuda.is_available()
    row("GPU (torch)", gpu, torch.cuda.get_device_name() if gpu else f"torch {torch.__version__}: no CUDA device")
    try:
        from cuda.bindings import driver  # noqa: F401

        row("cuda.bindings", True, "driver API bindings importable")
    except ImportError:
        row("cuda.bindings", False, "not installed (needed to launch CUDA families)")
    if args.ray_address:
        prepare_to_join()  # before Ray is imported: it reads its settings then
    import ray

    row("Ray", True, f"ray {ray.__version__}", True)
    if args.ray_address:
        ok, detail = _check_cluster(args.ray_address)
        row("Ray cluster", ok, detail, True)
    try:
        database = Database(resolve_url(args.db))
        if database.exists():
            database.open(create=False)
            row("database", True, f"{database.description} at schema {database.current_revision()}", True)
        elif (why := database.cannot_create()) is not None:
            row("database", False, f"{database.description} cannot be created there: {why}", True)
        else:
            row("database", True, f"{database.description} (will be created)", True)
    except (ValueError, SchemaError) as exc:
        row("database", False, str(exc), True)
    console.print(table)
    return 0 if essential_ok else 1


def _evo_importable() -> str:
    """Run on a cluster's worker: where evo's packages are found there."""
    import evo
    import evo.fitness as fitness  # noqa: F401
    import evo.seeds as seeds  # noqa: F401

    return str(Path(evo.__file__).parent.parent)


def _check_cluster(address: str) -> tuple[bool, str]:
    """(joined, what it has): nodes, CPUs and GPUs, and whether evo imports on its workers."""
    import ray

    from evo.fitness import RayUnavailable, start_ray

    try:
        release = start_ray(address)
    except RayUnavailable as exc:
        return False, str(exc)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        resources = ray.cluster_resources()
        try:
            where = ray.get(ray.remote(num_cpus=0)(_evo_importable).remote(), timeout=60)
            imports = f"evo imports on its workers ({where})"
        except Exception as exc:  # noqa: BLE001 - whatever the worker says is the answer
            return False, f"{len(nodes)} nodes, but evo does not import on its workers: {str(exc).splitlines()[0][:200]}"
        return True, (f"{address}: {len(nodes)} node(s), {resources.get('CPU', 0):g} CPUs, "
                      f"{resources.get('GPU', 0):g} GPUs; {imports}")
    finally:
        release()
