"""The report's charts as PNG bytes (matplotlib, no display needed)."""

from __future__ import annotations

import io

from evo.report._data import OK, LineageReport

US = 1e6
STATUS_COLOURS = {"ok": "#2b8a3e", "screened_out": "#868e96", "incorrect": "#e67700", "crashed": "#c92a2a",
                  "timeout": "#862e9c", "compile_error": "#1864ab", "compile_timeout": "#364fc7",
                  "worker_lost": "#5c940d", "unverified": "#adb5bd"}


def _figure(width: float = 7.5, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(width, height), dpi=110)
    axes.grid(True, alpha=0.3)
    return plt, figure, axes


def _png(plt, figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


TITLES = {"convergence_evaluations": "Convergence against evaluations",
          "convergence_time": "Convergence against wall time",
          "generations": "Population spread per generation",
          "statuses": "Evaluations by status",
          "importance": "Which knobs explain the time",
          "shapes": "Speedup of the fastest kernel over the anchor, per shape"}


def _reference_lines(axes, report: LineageReport) -> None:
    if report.anchor_s:
        axes.axhline(report.anchor_s * US, color="#1971c2", linestyle="--", linewidth=1.2,
                     label=f"anchor {report.anchor_s * US:.3g} us")
    if report.target_s:
        axes.axhline(report.target_s * US, color="#e03131", linestyle=":", linewidth=1.5,
                     label=f"target {report.target_s * US:.3g} us")


def _time_chart(plt, figure, axes, report: LineageReport, xlabel: str, name: str) -> bytes:
    """Finish a chart of the fitness shape's times: anchor and target lines, log axis, labels, PNG."""
    _reference_lines(axes, report)
    axes.set_yscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(f"time at {report.fitness_shape or 'the mission shape'} (us, log)")
    axes.set_title(TITLES[name])
    axes.legend(fontsize=8, loc="upper right")
    return _png(plt, figure)


def convergence_by_evaluation(report: LineageReport) -> bytes:
    plt, figure, axes = _figure()
    correct = [p for p in report.points if p.status == OK and p.fitness_s]
    axes.scatter([p.index for p in correct], [p.fitness_s * US for p in correct], s=9, color="#adb5bd",
                 label="each correct kernel")
    best = [p for p in report.points if p.best_so_far_s]
    axes.step([p.index for p in best], [p.best_so_far_s * US for p in best], where="post", color="#2b8a3e",
              linewidth=2, label="best so far")
    return _time_chart(plt, figure, axes, report, "evaluations finished", "convergence_evaluations")


def convergence_by_time(report: LineageReport) -> bytes:
    plt, figure, axes = _figure()
    best = [p for p in report.points if p.best_so_far_s]
    axes.step([p.elapsed_s for p in best], [p.best_so_far_s * US for p in best], where="post", color="#2b8a3e",
              linewidth=2, label="best so far")
    return _time_chart(plt, figure, axes, report, "wall time since the run started (s)", "convergence_time")


def generation_spread(report: LineageReport) -> bytes:
    plt, figure, axes = _figure()
    rows = [g for g in report.generations if g.best_s]
    x = [g.generation for g in rows]
    axes.fill_between(x, [g.best_s * US for g in rows], [g.worst_s * US for g in rows], color="#d0ebff",
                      label="fastest .. slowest correct")
    axes.plot(x, [g.median_s * US for g in rows], color="#1c7ed6", marker="o", markersize=3, label="median")
    axes.plot(x, [g.best_s * US for g in rows], color="#2b8a3e", linewidth=1.5, label="fastest")
    return _time_chart(plt, figure, axes, report, "generation", "generations")


def failures(report: LineageReport) -> bytes:
    plt, figure, axes = _figure(height=2.4)
    items = sorted(report.failures.items(), key=lambda kv: -kv[1])
    axes.barh([k for k, _ in items], [v for _, v in items],
              color=[STATUS_COLOURS.get(k, "#495057") for k, _ in items])
    for y, (_, v) in enumerate(items):
        axes.text(v, y, f" {v}", va="center", fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("evaluations")
    axes.set_title(TITLES["statuses"])
    return _png(plt, figure)


def importance(report: LineageReport) -> bytes:
    knobs = [k for k in report.knobs if k.importance is not None]
    plt, figure, axes = _figure(height=max(2.0, 0.28 * len(knobs) + 0.9))
    axes.barh([k.knob for k in knobs], [k.importance for k in knobs], color="#7048e8")
    axes.invert_yaxis()
    axes.set_xlabel("importance (share, PED-ANOVA)")
    axes.set_title(TITLES["importance"])
    return _png(plt, figure)


PALETTE = ("#1c7ed6", "#2b8a3e", "#e8590c", "#7048e8", "#c2255c", "#0c8599", "#5c940d", "#862e9c", "#d9480f", "#364fc7")


def shape_speedups(report: LineageReport) -> bytes:
    """One bar a shape: the fastest verified kernel's speedup over the anchor (log scale), coloured by
    kernel (which genome wins where); hatched where the op runs PyTorch instead."""
    rows = [r for r in report.dispatch.rows if r.speedup]
    plt, figure, axes = _figure(width=9.0, height=max(2.4, 0.26 * len(rows) + 1.2))
    kernels = list(dict.fromkeys(r.genome_id for r in rows))
    colours = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(kernels)}
    bars = axes.barh([r.shape for r in rows], [r.speedup - 1.0 for r in rows], left=1.0,  # from the anchor's 1x
                     color=[colours[r.genome_id] for r in rows])
    for bar, r in zip(bars, rows):
        if not r.chosen:
            bar.set_hatch("///")
            bar.set_alpha(0.45)
    axes.axvline(1.0, color="#c92a2a", linewidth=1.2, linestyle="--", label="anchor")
    axes.set_xscale("log")
    low, high = min(r.speedup for r in rows), max(r.speedup for r in rows)
    axes.set_xlim(min(low, 0.9) / 1.15, max(high, 1.1) * 1.15)
    axes.invert_yaxis()
    axes.set_xlabel("speedup over the anchor (log; hatched: the op runs PyTorch there)")
    axes.set_title(TITLES["shapes"])
    from matplotlib.patches import Patch

    handles = [Patch(color=colours[g], label=g) for g in kernels[:len(PALETTE)]]
    axes.legend(handles=[*axes.get_legend_handles_labels()[0], *handles], fontsize=7, loc="upper left",
                bbox_to_anchor=(1.01, 1.0), title="kernel", title_fontsize=7)
    return _png(plt, figure)


def all_charts(report: LineageReport) -> dict[str, bytes]:
    """Chart name -> PNG; the importance chart only when importances could be computed."""
    charts = {"convergence_evaluations": convergence_by_evaluation(report),
              "convergence_time": convergence_by_time(report),
              "generations": generation_spread(report),
              "statuses": failures(report)}
    if any(k.importance is not None for k in report.knobs):
        charts["importance"] = importance(report)
    if report.dispatch is not None and any(r.speedup for r in report.dispatch.rows):
        charts = {"shapes": shape_speedups(report), **charts}
    return charts
