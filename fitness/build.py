"""Build stage: compile a family's rendered source into a shared library or a cubin.

Artifacts live in a content-addressed cache keyed by source + flags + compiler identity;
a compile error is cached like a success (it is just as deterministic); a timeout is not.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from evo.fitness.records import BuildResult, Status
from evo.seeds import BuildRecipe

ARTIFACT_SUFFIX = {"shared_library": ".so", "cubin": ".cubin"}
LOG_LIMIT = 20_000  # characters of compiler output kept in a record


def default_cache_dir() -> Path:
    return Path(os.environ.get("EVO_CACHE", Path.home() / ".cache" / "evo" / "artifacts"))


@dataclass(frozen=True)
class BuildConfig:
    cache_dir: Path
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"build timeout_s must be positive, got {self.timeout_s}")


def compiler_command(compiler: str) -> str:
    if compiler == "c++":
        return os.environ.get("CXX", "c++")
    if compiler == "nvcc":
        cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        candidate = Path(cuda_home, "bin", "nvcc") if cuda_home else None
        return str(candidate) if candidate and candidate.exists() else "nvcc"
    raise ValueError(f"unknown compiler {compiler!r}")


def _version_banner(command: str) -> str:
    """``command --version``'s output; raises OSError or TimeoutExpired if it cannot be run."""
    return subprocess.run([command, "--version"], capture_output=True, text=True, timeout=30).stdout


def compiler_version(compiler: str) -> str | None:
    """One line naming the compiler's version (nvcc's "release" line, else the first), None if absent."""
    try:
        lines = [line.strip() for line in _version_banner(compiler_command(compiler)).splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((line for line in lines if "release" in line), lines[0] if lines else None)


@lru_cache(maxsize=None)
def compiler_identity(compiler: str) -> str:
    """The compiler's version banner (plus the host CPU for host code, which -march=native reads)."""
    command = compiler_command(compiler)
    try:
        banner = _version_banner(command)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{command}: unavailable ({exc})"
    identity = banner.strip()
    if compiler == "c++":
        identity += "\n" + platform.machine() + " " + cpu_name()
    return identity


def cpu_name() -> str:
    """The host CPU's model name (what -march=native compiles for)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def artifact_key(recipe: BuildRecipe) -> str:
    payload = json.dumps(
        [recipe.source, recipe.source_name, recipe.compiler, list(recipe.flags), recipe.output,
         [Path(d).as_posix() for d in recipe.include_dirs], compiler_identity(recipe.compiler)]
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _command(recipe: BuildRecipe, source: Path, output: Path) -> list[str]:
    includes = [f"-I{d}" for d in recipe.include_dirs]
    if recipe.compiler == "nvcc":
        verbose = [] if any("ptxas" in f and "-v" in f for f in recipe.flags) else ["-Xptxas=-v"]
        return [compiler_command("nvcc"), "-cubin", *recipe.flags, *verbose, *includes, str(source), "-o", str(output)]
    return [compiler_command(recipe.compiler), *recipe.flags, *includes, str(source), "-o", str(output)]


_DEFINE = re.compile(r"-D([A-Za-z_][A-Za-z0-9_]*)=(\S+)$")
_PRAGMA = re.compile(r"^(\s*#\s*pragma\b)(.*)$", re.MULTILINE)


def expand_macros_in_pragmas(source: str, flags) -> str:
    """The source with each ``-DNAME=VALUE`` macro of ``flags`` written out in its ``#pragma`` lines, where
    compilers do not expand macros (``#pragma GCC unroll UNROLL``); every other line is left to the
    preprocessor, and the line count is kept (compiler messages point at the user's lines)."""
    macros = dict(m.groups() for m in map(_DEFINE.match, flags) if m)
    if not macros:
        return source
    names = re.compile(r"\b(" + "|".join(map(re.escape, sorted(macros, key=len, reverse=True))) + r")\b")

    def expand(line: re.Match) -> str:
        return line.group(1) + names.sub(lambda m: macros[m.group(1)], line.group(2))

    return _PRAGMA.sub(expand, source)


class Builder:
    """Compiles recipes into the cache. Safe to use from several processes at once."""

    def __init__(self, config: BuildConfig) -> None:
        self.config = config

    def build(self, genome_id: str, recipe: BuildRecipe) -> BuildResult:
        start = time.perf_counter()
        key = artifact_key(recipe)
        entry = self.config.cache_dir / key[:2] / key
        cached = self._read_entry(entry, recipe)
        if cached is not None:
            status, message, artifact, log = cached
            return BuildResult(genome_id, status, message, key, artifact, time.perf_counter() - start, True, log)
        status, message, artifact, log = self._compile(entry, recipe)
        return BuildResult(genome_id, status, message, key, artifact, time.perf_counter() - start, False, log)

    def _read_entry(self, entry: Path, recipe: BuildRecipe):
        meta_path = entry / "meta.json"
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            log = (entry / "build.log").read_text()
            status = Status(meta["status"])
            artifact = (entry / ("artifact" + ARTIFACT_SUFFIX[recipe.output])).read_bytes() if status is Status.OK else None
        except (OSError, ValueError, KeyError):
            return None  # a damaged entry is rebuilt
        return status, meta["message"], artifact, log

    def _compile(self, entry: Path, recipe: BuildRecipe):
        self.config.cache_dir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=self.config.cache_dir))
        try:
            source = work / recipe.source_name
            source.write_text(expand_macros_in_pragmas(recipe.source, recipe.flags))
            output = work / ("artifact" + ARTIFACT_SUFFIX[recipe.output])
            command = _command(recipe, source, output)
            try:
                returncode, log = _run_with_timeout(command, self.config.timeout_s, cwd=work)
            except FileNotFoundError:
                return Status.COMPILE_ERROR, f"compiler not found: {command[0]}", None, ""
            log = (" ".join(command) + "\n" + _named_as_yours(log, source, recipe))[:LOG_LIMIT]
            if returncode is None:
                return (Status.COMPILE_TIMEOUT, f"compiler still running after {self.config.timeout_s:g} s",
                        None, log)
            if returncode != 0 or not output.exists():
                status, message, artifact = Status.COMPILE_ERROR, _first_error(log, returncode), None
            else:
                status, message, artifact = Status.OK, "", output.read_bytes()
            (work / "build.log").write_text(log)
            (work / "meta.json").write_text(json.dumps({"status": status.value, "message": message}))
            entry.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(work, entry)  # atomic publish; another builder may have won the race
            except OSError:
                pass
            return status, message, artifact, log
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _run_with_timeout(command: list[str], timeout_s: float, cwd: Path) -> tuple[int | None, str]:
    """Run a compiler in its own process group; on timeout kill the whole group (cicc, ptxas...)."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=timeout_s)
        return process.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        return None, out


def _named_as_yours(log: str, scratch: Path, recipe: BuildRecipe) -> str:
    """The compiler's words with the build's scratch copy of the source named as the family's own file (its
    lines are the same lines: only #pragma lines had their macros written out)."""
    return log.replace(str(scratch), str(recipe.origin or recipe.source_name))


def _first_error(log: str, returncode: int) -> str:
    for line in log.splitlines()[1:]:
        if "error" in line.lower():
            return line.strip()[:500]
    return f"compiler exited with code {returncode}"
