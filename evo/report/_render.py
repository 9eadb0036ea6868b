"""The lineage report in four formats: html (one self-contained file), md (+ PNGs), dot, json."""

from __future__ import annotations

import base64
import html
import json
from dataclasses import asdict
from pathlib import Path

from evo.report._charts import TITLES, all_charts
from evo.report._data import LineageReport, Step
from evo.fitness import format_seconds

FORMATS = ("html", "md", "dot", "json")


def _speedup(step: Step) -> str:
    if not step.speedup:
        return "-"
    return f"{step.speedup:.2f}x" + (" (timing spread: no knob it reads changed)" if step.only_unread else "")


def _changes(step: Step) -> str:
    return ", ".join(f"{k}: {before} -> {after}" + (" (not read)" if k in step.unread else "")
                     for k, (before, after) in step.changed.items()) or "-"


def _how(step: Step) -> str:
    if not step.parent_ids:
        return step.operator
    others = f" (other parent {', '.join(map(str, step.parent_ids[1:]))})" if len(step.parent_ids) > 1 else ""
    return f"{step.operator} of {step.parent_ids[0]}{others}"


def _summary(report: LineageReport) -> list[tuple[str, str]]:
    run = report.run
    speedup = f"{report.anchor_s / report.best_s:.2f}x" if report.anchor_s and report.best_s else "-"
    rows = [("family", run.family), ("strategy", run.strategy), ("status", run.status),
            ("evaluations", str(sum(report.failures.values()))),
            ("target", f"{run.target or '-'} ({format_seconds(report.target_s)}"
                       + (" at the primary shape; every shape's target is to its own anchor)" if report.dispatch
                          else ")")),
            (f"anchor ({report.fitness_shape})", format_seconds(report.anchor_s)),
            ("timing", "cold caches (flushed before each run)" if run.cold_cache
             else "warm caches (back-to-back launches)")]
    if report.dispatch is not None:
        table = report.dispatch
        rows += [("workload", f"{table.workload.name}, {len(table.rows)} shapes, against {table.fallback}"),
                 ("per shape", table.summary()),
                 ("lineage shown", f"individual {report.best_id}, the kernel winning the most weight")]
    else:
        rows.append(("best kernel", f"individual {report.best_id}: {format_seconds(report.best_s)}, {speedup} vs anchor"))
    rows.append(("its genome" if report.dispatch else "best genome",
                 " ".join(f"{k}={v}" for k, v in sorted((report.best_genome or {}).items()))))
    return rows


SHAPE_HEADER = ["shape", "weight", "fastest kernel (individual)", "time", "anchor", "speedup", "op runs"]
WINNER_HEADER = ["kernel (individual)", "fastest verified at", "weight", "the op runs it at"]


def _shape_rows(report: LineageReport) -> list[list[str]]:
    rows = []
    for r in report.dispatch.rows if report.dispatch else ():
        kernel = f"{r.genome_id} ({r.individual_id})" if r.genome_id else "-"
        runs = "PyTorch" if not r.chosen else "kernel" + ("" if r.confirmed else " (unconfirmed)")
        rows.append([r.shape, f"{r.weight:g}", kernel, format_seconds(r.kernel_s), format_seconds(r.anchor_s),
                     f"{r.speedup:.2f}x" if r.speedup else "-", runs])
    return rows


def _winner_rows(report: LineageReport) -> list[list[str]]:
    """Which genome wins where: each kernel that is the fastest verified one at some shape."""
    winners: dict[str, list] = {}
    for r in report.dispatch.rows if report.dispatch else ():
        if r.genome_id:
            winners.setdefault(r.genome_id, []).append(r)
    total = sum(r.weight for r in report.dispatch.rows) if report.dispatch else 1.0
    ordered = sorted(winners.items(), key=lambda item: -sum(r.weight for r in item[1]))
    return [[f"{genome} ({rows[0].individual_id})", ", ".join(r.shape for r in rows),
             f"{sum(r.weight for r in rows) / total:.0%}", ", ".join(r.shape for r in rows if r.chosen) or "-"]
            for genome, rows in ordered]


def _lineage_rows(report: LineageReport) -> list[list[str]]:
    return [[str(s.individual_id), str(s.generation), _how(s), _changes(s), format_seconds(s.parent_fitness_s),
             format_seconds(s.fitness_s), _speedup(s)] for s in report.steps]


LINEAGE_HEADER = ["individual", "gen", "how", "knobs changed (closest parent -> this)", "before", "after", "speedup"]
GENERATION_HEADER = ["generation", "evaluated", "correct", "fastest", "median", "slowest"]
KNOB_HEADER = ["knob", "importance", "best value", "per value: correct/evaluated, fastest, median"]


def _generation_rows(report: LineageReport) -> list[list[str]]:
    return [[str(g.generation), str(g.evaluated), str(g.correct), format_seconds(g.best_s),
             format_seconds(g.median_s), format_seconds(g.worst_s)] for g in report.generations]


def _knob_rows(report: LineageReport) -> list[list[str]]:
    rows = []
    for k in report.knobs:
        per_value = "; ".join(f"{v.value}: {v.correct}/{v.evaluated}, {format_seconds(v.best_s)}, "
                              f"{format_seconds(v.median_s)}" for v in k.values)
        importance = f"{k.importance:.3f}" if k.importance is not None else ("-" if k.read else "not read")
        rows.append([k.knob, importance, str(k.best_value), per_value])
    return rows


# -- json ---------------------------------------------------------------------------------------
def to_json(report: LineageReport) -> str:
    data = asdict(report)
    if report.dispatch is not None:
        table = report.dispatch
        data["dispatch"] = {"workload": table.workload.to_dict(), "fallback": table.fallback,
                            "op_geomean": table.op_geomean, "kernel_geomean": table.kernel_geomean,
                            "rows": [dict(asdict(r), speedup=r.speedup) for r in table.rows]}
    data["run"] = {k: (str(v) if k.endswith("_at") and v is not None else v) for k, v in data["run"].items()}
    data["ancestors"] = sorted(report.ancestors)
    data["labels"] = {str(k): v for k, v in report.labels.items()}
    for step, raw in zip(report.steps, data["steps"]):
        raw["speedup"] = step.speedup
    return json.dumps(data, indent=1, default=str)


# -- dot ----------------------------------------------------------------------------------------
def to_dot(report: LineageReport) -> str:
    lines = [f'digraph "run {report.run.id} lineage" {{', "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, fillcolor="#f1f3f5"];']
    path = {s.individual_id for s in report.steps}
    for individual, (generation, origin, status, fitness) in sorted(report.labels.items()):
        label = f"#{individual} g{generation} {origin}\\n{format_seconds(fitness) if fitness else status or 'pending'}"
        colour = "#b2f2bb" if individual in path else ("#d0ebff" if individual in report.ancestors else "#f1f3f5")
        lines.append(f'  n{individual} [label="{label}", fillcolor="{colour}"];')
    for edge in report.edges:
        style = ', color="#2b8a3e", penwidth=2' if edge.parent_id in path and edge.child_id in path else ""
        knobs = ",".join(edge.changed_knobs)
        lines.append(f'  n{edge.parent_id} -> n{edge.child_id} [label="{edge.operator}\\n{knobs}", fontsize=8{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- markdown -----------------------------------------------------------------------------------
def _md_table(header: list[str], rows: list[list[str]]) -> str:
    escape = lambda text: text.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(report: LineageReport, chart_files: dict[str, str]) -> str:
    parts = [f"# Run {report.run.id}: how the best kernel was found", "",
             _md_table(["", ""], [[k, v] for k, v in _summary(report)]), ""]
    if report.dispatch is not None:
        parts += ["## Per shape: the fastest verified kernel against the anchor", "",
                  _md_table(SHAPE_HEADER, _shape_rows(report)), "", "## Which kernel wins where", "",
                  _md_table(WINNER_HEADER, _winner_rows(report)), ""]
    parts += ["## Lineage of the best kernel (seed first)", "", _md_table(LINEAGE_HEADER, _lineage_rows(report)), ""]
    for name, file in chart_files.items():
        parts += [f"## {TITLES[name]}", "", f"![{TITLES[name]}]({file})", ""]
    parts += ["## Generations", "", _md_table(GENERATION_HEADER, _generation_rows(report)), "",
              "## Knobs", "", f"Importance: {report.importance_method}.", "",
              _md_table(KNOB_HEADER, _knob_rows(report)), ""]
    return "\n".join(parts)


# -- html ---------------------------------------------------------------------------------------
STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #212529; line-height: 1.45; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #dee2e6; }
table { border-collapse: collapse; width: 100%; font-size: .88rem; margin: .6rem 0; }
th, td { border: 1px solid #dee2e6; padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #f1f3f5; } tr:nth-child(even) td { background: #f8f9fa; }
td.num { text-align: right; white-space: nowrap; } .faster { color: #2b8a3e; font-weight: 600; }
.slower { color: #c92a2a; } .summary td:first-child { width: 14rem; font-weight: 600; }
.charts figure { margin: 0 0 1rem 0; } .charts img { width: 100%; max-width: 900px; border: 1px solid #dee2e6; }
table.lineage td:nth-child(4) { min-width: 18rem; }
code { font-size: .85rem; } .note { color: #495057; font-size: .9rem; }
"""


def _html_table(header: list[str], rows: list[list[str]], numeric: set[int] = frozenset(), css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            classes = ["num"] if i in numeric else []
            if header and header[i] == "speedup" and cell.endswith("x"):
                classes.append("faster" if float(cell[:-1]) > 1.0 else "slower")
            cells.append(f'<td class="{" ".join(classes)}">{html.escape(cell)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    thead = f"<thead><tr>{head}</tr></thead>" if header else ""
    return f'<table class="{css}">{thead}<tbody>{"".join(body)}</tbody></table>'


def to_html(report: LineageReport, charts: dict[str, bytes]) -> str:
    images = "".join(f'<figure><img alt="{TITLES[name]}" src="data:image/png;base64,'
                     f'{base64.b64encode(png).decode()}"></figure>' for name, png in charts.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>evo run {report.run.id}: lineage</title>
<style>{STYLE}</style></head><body>
<h1>Run {report.run.id}: how the best kernel was found</h1>
<p class="note">Read from the evo database; every time is a median measured by the evaluator (in the lineage,
at {html.escape(report.fitness_shape)}),
the anchor timed in the same process.</p>
{_html_table([], [[k, v] for k, v in _summary(report)], css="summary")}
{_html_shapes(report)}
<h2>Lineage of the best kernel (seed first)</h2>
<p class="note">Each row is one step through the closest parent (fewest differing knobs); "before" is that parent's time.</p>
{_html_table(LINEAGE_HEADER, _lineage_rows(report), numeric={0, 1, 4, 5, 6}, css="lineage")}
<h2>Charts</h2><div class="charts">{images}</div>
<h2>Generations</h2>
{_html_table(GENERATION_HEADER, _generation_rows(report), numeric={0, 1, 2, 3, 4, 5})}
<h2>Knobs</h2><p class="note">Importance: {html.escape(report.importance_method)}.</p>
{_html_table(KNOB_HEADER, _knob_rows(report), numeric={1})}
</body></html>
"""


def _html_shapes(report: LineageReport) -> str:
    if report.dispatch is None:
        return ""
    return (f"<h2>Per shape: the fastest verified kernel against the anchor</h2>"
            f"{_html_table(SHAPE_HEADER, _shape_rows(report), numeric={1, 3, 4, 5})}"
            f"<h2>Which kernel wins where</h2>{_html_table(WINNER_HEADER, _winner_rows(report), numeric={2})}")


def write_report(report: LineageReport, fmt: str, out: Path) -> list[Path]:
    """Write the report; returns the files written. ``out`` is a file (html, dot, json) or, for md,
    the Markdown file whose PNG charts go beside it."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "json":
        out.write_text(to_json(report))
        return [out]
    if fmt == "dot":
        out.write_text(to_dot(report))
        return [out]
    charts = all_charts(report)
    if fmt == "html":
        out.write_text(to_html(report, charts))
        return [out]
    written, files = [], {}
    for name, png in charts.items():
        path = out.with_name(f"{out.stem}-{name}.png")
        path.write_bytes(png)
        written.append(path)
        files[name] = path.name
    out.write_text(to_markdown(report, files))
    return [out, *written]
