"""The captured neural frame's targets, read from one ``bench/gpu_check.sh`` run: one Markdown table and its JSON.

Reads what the check wrote in its work folder: ``rl_policy.json`` (``bench_rl.py --policy --capture-frame``) and
the ``train_summary.json`` of the PPO runs ``ppo_ant_graph``, ``ppo_ant_plain`` and ``ppo_ant_gt``. A figure whose
run is missing (skipped, failed, or a robot or size the run did not time) is reported as such.

PPO's throughput is the steady state: env-steps over seconds from the end of the first epoch to the end of the last
(the first pays the kernels' loading and the graph's recording).

Example:
    python bench/gpu_targets.py outputs/gpu_check/work --output outputs/gpu_check/targets.json
"""

import argparse
import json
from pathlib import Path
from typing import Any

from nerd.cli import run_main
from nerd.errors import UserError
from nerd.run_dir import write_text_atomic

TARGETS = [
    ("ANYmal forward_walk, neural env-steps/s at N = 8192", "Anymal", 8192, "rate", 450e3, 1e6),
    ("Ant run, neural / ground truth at N = 512", "Ant", 512, "ratio", 5.0, 10.0),
    ("Cartpole, neural / ground truth at N = 8192", "Cartpole", 8192, "ratio", 1.0, None),
    ("Ant run, share of the FLOP floor at N = 8192", "Ant", 8192, "share", 0.30, 0.50),
    ("ANYmal forward_walk, share of the FLOP floor at N = 8192", "Anymal", 8192, "share", 0.30, 0.50),
]
"""The issue's targets: what, robot, env count, which figure, required, goal (None: none)."""


def row_figures(row: dict[str, Any] | None, kind: str) -> dict[str, float | None]:
    """The plain and the captured neural step's figure of ``kind`` in one bench_rl row."""
    figures: dict[str, float | None] = {}
    for name, key in (("plain", "neural"), ("captured", "neural_graph")):
        rate = (row or {}).get(key, {}).get("best")
        if rate is None:
            figures[name] = None
        elif kind == "rate":
            figures[name] = rate
        elif kind == "ratio":
            figures[name] = rate / row["ground-truth"]["best"]
        else:
            figures[name] = rate / row["floor_env_steps_per_s"]
    return figures


def ppo_rate(path: Path) -> float | None:
    """Steady-state PPO env-steps/s (learner included) of one run's train summary; None without two epochs."""
    if not path.is_file():
        return None
    epochs = json.loads(path.read_text())["epochs"]
    if len(epochs) < 2:
        return None
    first, last = epochs[0], epochs[-1]
    return (last["frames"] - first["frames"]) / (last["seconds"] - first["seconds"])


def fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "not measured"
    return {"rate": f"{value:,.0f}", "ratio": f"{value:.2f}x", "share": f"{100 * value:.0f} %"}[kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", help="the folder gpu_check.sh wrote its results in")
    parser.add_argument("--output", default=None, help="JSON of the table (default: <work>/targets.json)")
    args = parser.parse_args()
    work = Path(args.work)
    if not work.is_dir():
        raise UserError(f"{work} is not a folder")
    bench = work / "rl_policy.json"
    rows = json.loads(bench.read_text())["rows"] if bench.is_file() else []
    results: dict[str, Any] = {"targets": [], "ppo_env_steps_per_s": {}}
    lines = ["| what | plain neural step | captured frame | required | goal |", "|---|---|---|---|---|"]
    for what, robot, n, kind, required, goal in TARGETS:
        row = next((r for r in rows if r["robot"] == robot and r["num_envs"] == n), None)
        figures = row_figures(row, kind)
        results["targets"].append({"what": what, **figures, "required": required, "goal": goal})
        lines.append(f"| {what} | {fmt(figures['plain'], kind)} | {fmt(figures['captured'], kind)} | "
                     f"{fmt(required, kind)} | {fmt(goal, kind) if goal is not None else '–'} |")
    lines += ["", "| Ant run PPO, steady state | env-steps/s, learner included |", "|---|---|"]
    for name, label in (("graph", "NeRD, captured frame"), ("plain", "NeRD, plain step"), ("gt", "ground truth")):
        rate = ppo_rate(work / f"ppo_ant_{name}" / "train_summary.json")
        results["ppo_env_steps_per_s"][name] = rate
        lines.append(f"| {label} | {fmt(rate, 'rate')} |")
    output = Path(args.output) if args.output else work / "targets.json"
    write_text_atomic(output, json.dumps(results, indent=2))
    print("\n".join(lines))
    print(f"\nwrote {output}")


if __name__ == "__main__":
    run_main(main)
