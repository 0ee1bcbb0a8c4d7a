"""PNG plots of benchmark results, and the JSON files they are drawn from.

A benchmark that plots writes its raw results as JSON first (``write_results``), then
draws from them, so a run on older code (``--before FILE`` of that benchmark) and a run on
newer code end up in one picture: before and after, each ratio against its own ceiling
measured in its own run. The images go to ``bench/plots/`` (``PLOTS_DIR``), the results
they were drawn from to ``bench/results/`` (``RESULTS_DIR``), and both are shown in
``bench/README.md``.

Two kinds of picture cover what the benchmarks compare:

* ``lag_distributions``: latency samples (commit to visible, per change) of one or more
  runs as cumulative distributions on a log axis, with the goals as vertical lines;
* ``ratios_to_ceiling``: measured rate / ceiling rate per measure, one bar per run
  (before, after), with the goal as a horizontal line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt

PLOTS_DIR = Path(__file__).resolve().parent / "plots"
#: Where the JSON results behind the plots in bench/README.md are kept.
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def write_results(path: Path, results: Mapping[str, Any]) -> Path:
    """``results`` as JSON at ``path`` (its directory made), for a later plot or a later
    run's ``--before``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return path


def read_results(path: Path) -> dict[str, Any]:
    """What ``write_results`` wrote."""
    loaded = json.loads(path.read_text())
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a results file (a JSON object)")
    return loaded


def lag_distributions(
    series: Mapping[str, Sequence[float]], path: Path, *, title: str,
    goals_ms: Mapping[str, float] | None = None, unit: str = "ms",
) -> Path:
    """One cumulative distribution per label (samples in ``unit``), log x-axis; each goal
    (label -> value) a dashed vertical line. Returns ``path``."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    for label, samples in series.items():
        ordered = sorted(samples)
        if not ordered:
            continue
        n = len(ordered)
        ax.step(ordered, [(i + 1) / n for i in range(n)], where="post",
                label=f"{label} (n={n})")
    for name, value in (goals_ms or {}).items():
        ax.axvline(value, linestyle="--", linewidth=1, color="grey")
        ax.annotate(name, (value, 0.02), rotation=90, fontsize=8, color="grey",
                    xytext=(3, 0), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel(f"lag ({unit}, log scale)")
    ax.set_ylabel("share of changes seen")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def ratios_to_ceiling(
    measures: Mapping[str, Mapping[str, float]], path: Path, *, title: str,
    goal: float | None = None, ylabel: str = "rate / ceiling (same run)",
) -> Path:
    """Grouped bars: for each measure, one bar per run label (``measures[measure][run]``,
    a ratio to the ceiling measured in that run); ``goal`` a dashed horizontal line.
    Returns ``path``."""
    runs: list[str] = []
    for per_run in measures.values():
        runs.extend(r for r in per_run if r not in runs)
    width = 0.8 / max(1, len(runs))
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    names = list(measures)
    for i, run in enumerate(runs):
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(names))]
        ys = [measures[name].get(run, float("nan")) for name in names]
        bars = ax.bar(xs, ys, width=width, label=run)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    if goal is not None:
        ax.axhline(goal, linestyle="--", linewidth=1, color="grey")
        ax.annotate(f"goal {goal:g}", (len(names) - 0.5, goal), fontsize=8, color="grey",
                    xytext=(-40, 3), textcoords="offset points")
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
