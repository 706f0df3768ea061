r"""Error against training compute: a power law per series, and the compute at which it would reach a target.

Each series is a chain of models trained one from the other (or one run's checkpoints); each point is one model,
with the windows it had seen in all (its ancestors' included) and its errors at one horizon under one evaluation
protocol, read from an ``eval/eval_passive_motion.py`` JSON or written into the spec (numbers from a model's
README). Per series and metric, ``log error = log a + b log windows`` is fitted by least squares over the points at
or above ``fit_from_windows``; where the error falls (b < 0), the windows at which the line reaches the target, and
that as a multiple of the series' last point, are reported. A fit over a few points of a chain whose learning rate
was restarted and annealed is a rough guide, not a prediction: the report says over which points it was made.

The spec is YAML, validated on load (an unknown key or a wrong type is an error naming it)::

    horizon: 1000
    targets: {cart_position_error: 0.11, pole_angle_error: 0.12}
    series:
      look-ahead chain:
        - {windows: 5.75e6, eval: outputs/eval36/la_20.json, label: 20 CPU-min}
      shipped lineage:
        - {windows: 20.1e6, metrics: {cart_position_error: 0.723, pole_angle_error: 0.417}, label: "first model"}

Writes a JSON, a Markdown table and a PNG (error against windows, log-log, with the fits and the targets).

Example (docs/notebook/accuracy.md, "Error against windows under the release's protocol"):
    python studies/compute_curve/compute_curve.py studies/compute_curve/curves/cartpole_release_protocol.yaml \
        --output studies/compute_curve/results/cartpole_compute_curve.json
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nerd.cli import check_report_outputs, make_parser, run_main, write_report
from nerd.config import ConfigError, check_range, load_config
from nerd.errors import UserError


@dataclass
class CurvePoint:
    """One model of a series."""

    windows: float
    """Training windows the model had seen in all, its ancestors' included."""
    eval: str | None = None
    """An ``eval_passive_motion.py`` JSON holding the spec's horizon (relative to the working directory)."""
    metrics: dict[str, float] | None = None
    """The errors themselves, where no JSON is at hand (say where they come from in ``label``)."""
    label: str = ""

    def __post_init__(self) -> None:
        check_range("windows", self.windows, low=0, low_open=True)
        if (self.eval is None) == (self.metrics is None):
            raise ConfigError("config key 'eval': give either 'eval' or 'metrics' for each point, not both or neither")


@dataclass
class CurveSpec:
    """What to plot and fit (the module docstring has an example)."""

    horizon: int
    targets: dict[str, float]
    """Metric name -> the error to reach; these are the metrics read, plotted and fitted."""
    series: dict[str, list[CurvePoint]]
    fit_from_windows: float = 0.0
    """Fit each series over its points at or above this many windows (the early, high-rate part of a chain can
    follow another law than its tail)."""
    title: str = ""
    protocol: str = ""
    """The evaluation protocol the errors share, for the report (e.g. "env reset, 2048 rollouts, seed 500")."""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_range("horizon", self.horizon, low=0, low_open=True)
        if not self.targets:
            raise ConfigError("config key 'targets': name at least one metric and its target")
        for name, value in self.targets.items():
            check_range(f"targets.{name}", value, low=0, low_open=True)
        if not self.series:
            raise ConfigError("config key 'series': give at least one series")
        for name, points in self.series.items():
            if not points:
                raise ConfigError(f"config key 'series.{name}': give at least one point")


def point_metrics(point: CurvePoint, horizon: int, names: list[str]) -> dict[str, float]:
    """The point's errors for ``names`` at ``horizon``: from its evaluation JSON or its own ``metrics``."""
    if point.metrics is not None:
        source, values = f"point '{point.label or point.windows}'", point.metrics
    else:
        path = Path(point.eval)
        if not path.is_file():
            raise UserError(f"evaluation JSON not found: {path}")
        try:
            report = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UserError(f"{path} is not a JSON file ({err.msg})") from None
        by_horizon = report.get("metrics_by_horizon") if isinstance(report, dict) else None
        if not isinstance(by_horizon, dict) or str(horizon) not in by_horizon:
            have = sorted(by_horizon, key=int) if isinstance(by_horizon, dict) else []
            raise UserError(f"{path} has no errors at horizon {horizon} (it has {have or 'none'}); is it an "
                            "eval_passive_motion.py report?")
        source, values = str(path), by_horizon[str(horizon)]
    missing = [name for name in names if name not in values]
    if missing:
        raise UserError(f"{source} has no '{missing[0]}' (it has {sorted(values)})")
    result = {name: float(values[name]) for name in names}
    bad = [name for name, value in result.items() if not (math.isfinite(value) and value > 0)]
    if bad:
        raise UserError(f"{source}: '{bad[0]}' is {result[bad[0]]}, not a positive error; a power law needs one")
    return result


def fit_power_law(windows: list[float], errors: list[float], target: float) -> dict | None:
    """Least-squares ``error = a * windows**b`` in log-log; None with fewer than two distinct windows.

    ``windows_to_target`` is where the line reaches ``target``: the last point's windows where the last point is
    already at or below it, None where the error does not fall (b > -1e-6) or the line reaches the target only
    past 1e300 windows (``verdict`` says which).
    """
    if len(set(windows)) < 2:
        return None
    x, y = np.log(np.asarray(windows)), np.log(np.asarray(errors))
    b, log_a = (float(v) for v in np.polyfit(x, y, 1))
    reach, verdict = None, "not falling"
    if errors[-1] <= target:
        reach, verdict = windows[-1], "reached"
    elif b < -1e-6:
        log_reach = (math.log(target) - log_a) / b
        if log_reach < math.log(1e300):
            reach, verdict = math.exp(log_reach), "extrapolated"
        else:
            verdict = "beyond 1e300 windows"
    return {"exponent": b, "prefactor": math.exp(log_a), "points": len(windows), "from_windows": float(min(windows)),
            "windows_to_target": reach, "verdict": verdict,
            "multiple_of_last": None if reach is None else reach / windows[-1]}


def compute_curve(spec: CurveSpec) -> dict:
    """Every point's errors and each series' fit per target metric."""
    names = list(spec.targets)
    results = {"horizon": spec.horizon, "targets": spec.targets, "title": spec.title, "protocol": spec.protocol,
               "fit_from_windows": spec.fit_from_windows, "notes": spec.notes, "series": {}}
    for series_name, points in spec.series.items():
        rows = sorted(({"label": p.label, "windows": p.windows, "eval": p.eval,
                        "metrics": point_metrics(p, spec.horizon, names)} for p in points),
                      key=lambda row: row["windows"])
        fitted = [row for row in rows if row["windows"] >= spec.fit_from_windows]
        fits = {name: fit_power_law([r["windows"] for r in fitted], [r["metrics"][name] for r in fitted],
                                    spec.targets[name]) for name in names}
        results["series"][series_name] = {"points": rows, "fits": fits}
    return results


def _windows_text(value: float) -> str:
    if value >= 1e12:
        return f"{value:.1e}"
    return f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.1f} M"


def format_table(results: dict) -> str:
    """Markdown: one row per point, then one row per series' fit."""
    names = list(results["targets"])
    head = [f"# {results['title'] or 'Error against training windows'}", "",
            f"Horizon {results['horizon']}" + (f"; {results['protocol']}" if results["protocol"] else "") + ".", ""]
    lines = head + ["| series | point | windows | " + " | ".join(names) + " |",
                    "|---|---|---|" + "---|" * len(names)]
    for series_name, row in results["series"].items():
        for point in row["points"]:
            lines.append(f"| {series_name} | {point['label']} | {_windows_text(point['windows'])} | "
                         + " | ".join(f"{point['metrics'][name]:.3f}" for name in names) + " |")
    over = (f"points at or above {_windows_text(results['fit_from_windows'])} windows"
            if results["fit_from_windows"] > 0 else "all points")
    lines += ["", f"Power law per series ({over}): exponent b of error ~ windows^b; windows where the line reaches "
              "the target (x the series' last point).", "",
              "| series | fit points | " + " | ".join(f"{name} (target {results['targets'][name]})"
                                                     for name in names) + " |",
              "|---|---|" + "---|" * len(names)]
    for series_name, row in results["series"].items():
        cells, count = [], 0
        for name in names:
            fit = row["fits"][name]
            if fit is None:
                cells.append("no fit: fewer than two windows")
                continue
            count = fit["points"]
            reach = fit["windows_to_target"]
            cells.append(f"b = {fit['exponent']:.2f}; " + (fit["verdict"] if reach is None else
                                                           f"{_windows_text(reach)} ({fit['multiple_of_last']:.3g}x)"))
        lines.append(f"| {series_name} | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fit_span(fit: dict, last_windows: float, most: float) -> np.ndarray:
    """The windows over which a fit is drawn: from its first point towards the target where the line falls to it, but
    not past 100x ``most`` (the largest windows of any point); a line that never reaches the target ends at its
    series' last point (extended, a rising line would set the plot's scale)."""
    reach = fit["windows_to_target"]
    end = last_windows if reach is None else min(max(last_windows, reach), 100 * most)
    return np.geomspace(fit["from_windows"], end, 50)


def plot(results: dict, path: Path) -> None:
    """Per metric, error against windows (log-log): the points, each fit (dotted, :func:`fit_span`) and the
    target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["targets"])
    most = max(p["windows"] for row in results["series"].values() for p in row["points"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for i, (series_name, row) in enumerate(results["series"].items()):
            windows = [p["windows"] for p in row["points"]]
            ax.plot(windows, [p["metrics"][name] for p in row["points"]], "o-", color=f"C{i}", label=series_name)
            fit = row["fits"][name]
            if fit is not None:
                span = fit_span(fit, windows[-1], most)
                ax.plot(span, fit["prefactor"] * span ** fit["exponent"], ":", color=f"C{i}")
        ax.axhline(results["targets"][name], color="k", lw=0.8, ls="--", label="target")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training windows seen (dotted: power-law fits)")
        ax.set_title(f"{name}, H = {results['horizon']}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7)
    if results["protocol"]:
        fig.suptitle(results["protocol"], fontsize=9)
    fig.tight_layout(rect=(0, 0.05 * ((len(labels) + 1) // 2), 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("spec", help="YAML spec of the series and their points")
    parser.add_argument("--output", required=True, help="JSON path; the table (.md) and plot (.png) go beside it")
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    args = parser.parse_args()
    output, png = check_report_outputs(args.output, args.overwrite, plot=True)
    results = compute_curve(load_config(args.spec, CurveSpec))
    write_report(output, results, format_table(results))
    plot(results, png)


if __name__ == "__main__":
    run_main(main)
