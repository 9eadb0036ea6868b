"""The ``evo`` command. Parses and validates input, prints, sets exit codes.

Exit codes: 0 target reached (or the budget ran out and no target was set); 1 internal error, a database
that failed, or a run another driver took over; 2 bad input (nothing written); 3 budget or time budget
exhausted before the target; 4 the search space ran out of new genomes; 5 the first evaluations all failed
the same way; 130 interrupted (Ctrl-C, SIGTERM); 141 the reader of the output went away.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import signal
import sys
from typing import Sequence

from rich.console import Console

from evo._config import MAX_COUNT, SETTINGS, SearchConfig
from evo._ends import BadInput, Failed, Interrupted

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as the shell's own tools end when their reader has gone




_URL_PASSWORD = re.compile(r"(\b[A-Za-z][\w+.-]*://[^:/@\s]*:)[^@\s]*@")


def hide_passwords(text: str) -> str:
    """``scheme://user:***@host``: no message evo prints echoes a password, even one typed in the wrong place."""
    return _URL_PASSWORD.sub(r"\1***@", text)


ERROR_LINE_LIMIT = 600  # a refusal echoing a huge argument is cut to this many characters


def error_line(text: str) -> str:
    """A refusal as one line: passwords hidden, control characters (a newline in an argument) escaped, cut to
    ERROR_LINE_LIMIT characters."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in hide_passwords(text))
    if len(line) <= ERROR_LINE_LIMIT:
        return line
    return f"{line[:ERROR_LINE_LIMIT // 2]} ... {line[-ERROR_LINE_LIMIT // 4:]} ({len(line)} characters, cut)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, not a usage dump
        raise BadInput(f"{self.prog}: {message} (see {self.prog} --help)")


_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only: int() would also take "٣"


def _int(text: str) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not an integer (digits 0-9)")
    return int(text)


def _positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be positive")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is more than the store holds (at most {MAX_COUNT})")
    return value


def _text(text: str) -> str:
    """A value that may not be empty (an empty --db or --ray-address is not the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value (leave the flag out for its default)")
    return text


def _shown(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _add_setting(parser: argparse.ArgumentParser, setting) -> None:
    """One declared search setting as a flag (its value None where not given: the experiment file or the
    default decides)."""
    default = SearchConfig.__dataclass_fields__[setting.field].default
    text = setting.help + ("" if default in (None, "", dataclasses.MISSING) else f" (default {default})")
    if setting.flag == "bool":
        parser.add_argument(setting.option, action=argparse.BooleanOptionalAction, default=None, help=text)
        return
    parse = {"positive": _positive_int, "int": _int, "text": None, "duration": None}[setting.flag]
    parser.add_argument(setting.option, type=parse, help=text)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="evo", description="Evolutionary search for fast, verified kernels.",
                     epilog=__doc__.split("\n\n", 1)[1])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    db_help = "SQLAlchemy URL or SQLite file path (default: $EVO_DB or ./evo.db)"

    search = commands.add_parser("search", help="run (or resume) a search")
    for setting in SETTINGS:  # the search's settings, declared once in evo/_config.py
        if setting.flag is not None:
            _add_setting(search, setting)
    search.add_argument("--workload", metavar="NAME|FILE", help="tune for every shape of a workload: one of the "
                        "family's (see `evo families`) or a TOML file with a [workload] table of shapes and weights")
    search.add_argument("--sampler", help="Optuna sampler for --strategy optuna: tpe (default), random, "
                                          "nsgaii, bruteforce")
    search.add_argument("--experiment", help="TOML experiment file (flags override its values)")
    search.add_argument("--resume", type=_positive_int, metavar="RUN", help="continue a stopped run")
    search.add_argument("--db", type=_text, help=db_help)
    search.add_argument("--ray-address", type=_text, help="Ray cluster to use (default: start a local one)")

    runs = commands.add_parser("runs", help="list the runs in the database")
    runs.add_argument("--db", type=_text, help=db_help)

    show = commands.add_parser("show", help="a run's best individuals and failure counts")
    show.add_argument("run", type=_positive_int)
    show.add_argument("--top", type=_positive_int, default=5)
    show.add_argument("--db", type=_text, help=db_help)

    lineage = commands.add_parser("lineage", help="how a run's best kernel was found: ancestry, convergence, knobs")
    lineage.add_argument("run", type=_positive_int)
    lineage.add_argument("--format", default="html", help="html (default, one self-contained file), md (+ PNG "
                         "charts beside it), dot (Graphviz) or json")
    lineage.add_argument("--out", help="file to write (default: run-RUN-lineage.FORMAT)")
    lineage.add_argument("--db", type=_text, help=db_help)

    export = commands.add_parser("export", help="a verified kernel, or a workload run's dispatching op, as a "
                                 "standalone package (sources, artifacts, Python module with a torch custom op, "
                                 "metadata, self-check)")
    export.add_argument("run", type=_positive_int)
    export.add_argument("--individual", type=_positive_int, help="individual id (default: the run's best; a "
                        "workload run: its op, every shape's fastest kernel or PyTorch)")
    export.add_argument("--out", required=True, help="directory to create (must not exist or be empty)")
    export.add_argument("--db", type=_text, help=db_help)

    commands.add_parser("families", help="the kernel families and their knobs: built-in, installed, folders here")

    check = commands.add_parser("check", help="a family's pre-flight, and the build and screen (ptxas -v) of its seed "
                                "and a sample of its space, no GPU needed: registers, shared memory, spills, compile errors")
    check.add_argument("family", help="a family's name, folder, spec file or module:ATTRIBUTE")
    check.add_argument("--sample", type=_positive_int, help="genomes drawn at random beside the seed (default 8)")
    check.add_argument("--all", action="store_true", help="every genome of the space")
    check.add_argument("--cache-dir", type=_text, help="the build cache (default: evo's)")

    replay = commands.add_parser("replay", help="run strategies against recorded measurements (a Kernel Tuner cache "
                                 "file, or an evo run), without a GPU: evaluations to within 1%% and 5%% of the best")
    replay.add_argument("source", nargs="?", help="a Kernel Tuner cache file (.json or .json.gz)")
    replay.add_argument("--run", type=_positive_int, help="instead: replay against this run's evaluations (--db)")
    replay.add_argument("--strategies", default="surrogate,evolution,random,optuna", help="comma-separated (default: all)")
    replay.add_argument("--seeds", type=_positive_int, default=30, help="runs per strategy (default 30)")
    replay.add_argument("--budget", type=_positive_int, default=400, help="evaluations per run (default 400)")
    replay.add_argument("--population", type=_positive_int, default=8)
    replay.add_argument("--mode", default="loop", help="loop (as the search loop asks: a batch ahead) or sync")
    replay.add_argument("--db", type=_text, help=db_help)

    new_family = commands.add_parser("new-family", help="write a working family folder to start from (kernel, "
                                     "short spec, experiment file) in the current directory")
    new_family.add_argument("name", help="the family's name, a C identifier (also the folder's)")
    new_family.add_argument("--device", default="cpu", help="cpu (a C++ function; the default) or cuda (a CUDA kernel)")

    doctor = commands.add_parser("doctor", help="check nvcc, GPU, Ray, C++ compiler and the database")
    doctor.add_argument("--db", type=_text, help=db_help)
    doctor.add_argument("--ray-address", type=_text, help="also join this Ray cluster: its nodes, CPUs, GPUs, and whether evo "
                        "imports on its workers")

    database = commands.add_parser("db", help="database maintenance")
    db_commands = database.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    upgrade = db_commands.add_parser("upgrade", help="migrate the database to this evo's schema")
    upgrade.add_argument("--db", type=_text, help=db_help)
    current = db_commands.add_parser("current", help="print the database's schema revision")
    current.add_argument("--db", type=_text, help=db_help)
    return parser


def _values_may_start_with_a_dash(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``--target -1x`` as ``--target=-1x``: argparse takes a value that starts with a dash (and is not a
    plain negative number) for an option and says "expected one argument"; joined, the value reaches
    its own check, which names what is wrong with it."""
    valued, flags = set(), set()
    parsers = [parser]
    while parsers:
        current = parsers.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.option_strings:
                (valued if action.nargs is None and action.const is None else flags).update(action.option_strings)
    argv = list(argv)
    joined, index = [], 0
    while index < len(argv):
        token = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if token in valued and following is not None and following.startswith("-") and len(following) > 1 \
                and following.split("=")[0] not in valued | flags:
            joined.append(f"{token}={following}")
            index += 2
        else:
            joined.append(token)
            index += 1
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    # piped or captured: wide enough that tables (per-shape ones too) keep whole names and figures
    console = _Console() if sys.stdout.isatty() else _Console(width=200)
    errors = Console(stderr=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        parser = build_parser()
        args = parser.parse_args(_values_may_start_with_a_dash(parser, sys.argv[1:] if argv is None else argv))
        from evo import commands

        code = commands.dispatch(args, console)
        sys.stdout.flush()  # here, where a failure to write it is still ours to tell
        return code
    except BrokenPipeError:  # `evo show | head`: the reader has what it wanted
        _stdout_to_nowhere()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if not _output_failed(exc):
            raise
        _stdout_to_nowhere()
        errors.print(f"error: cannot write evo's output: {exc.strerror or exc}", highlight=False, markup=False)
        return EXIT_BAD_INPUT
    except BadInput as exc:
        errors.print(f"error: {error_line(str(exc))}", highlight=False, markup=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    except Interrupted as exc:
        errors.print(str(exc), highlight=False, markup=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    except Failed as exc:
        errors.print(f"error: {error_line(str(exc))}", highlight=False, markup=False, soft_wrap=True)
        return EXIT_FAILED
    except KeyboardInterrupt:
        errors.print("interrupted", highlight=False, markup=False)
        return EXIT_INTERRUPTED


def _output_failed(exc: OSError) -> bool:
    """Whether ``exc`` is standard output failing to take what evo printed (a full disk, /dev/full)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if frames and frames[-1].name == "_write_buffer" and "rich" in frames[-1].filename:
        return True
    try:
        sys.stdout.flush()
        return False
    except OSError:
        return True


class _Console(Console):
    """Rich's console, but a reader that went away (`evo show | head`) ends evo as it ends the shell's own tools
    (rich's own answer is exit 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def _stdout_to_nowhere() -> None:
    """What is left in standard output's buffer goes nowhere (else Python's exit says it could not flush it)."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
