"""Fine-tuning a simulation-trained CubeToss NeRD model on a few "real" tosses (the paper's Fig. 6 idea).

The paper fine-tunes its simulated cube model on real toss trajectories, which are not public. The stand-in here is
CubeToss's ``"real"`` variant: the same cube with a mismatched contact (mu 0.3 instead of 0.15, a 3x stiffer and
10x less damped contact spring, see :mod:`nerd.envs.cube_toss`). With N of its trajectories (``train_real.hdf5``,
first N) and its own validation file, this script trains, at the same CPU-time budget each:

* ``finetune-N``: the sim-trained model (``--sim-model``) fine-tuned (``init_from``: its weights and normalisation);
* ``scratch-N``: the same network from random weights on the same N trajectories (statistics of those N);

and evaluates on held-out "real" tosses (fresh initial states from the reset sampler, seed 500, the real ground
truth; none of them is in the training or validation files) the passive error of each, of the sim-trained model as
is, and of the mismatched analytical simulator itself (the ``"sim"`` ground truth rolled out against ``"real"``).
Checkpoints are chosen by validation loss on the real validation file (the per-epoch rollout check would use the
sim ground truth, so it is off).

Each run leaves ``<outdir>/<name>/record.json``; runs can go in separate processes (one per core) with ``--only``,
and ``--only references`` evaluates the two references (or ``--report`` does); ``--report`` writes the JSON, a
Markdown table and a PNG.

Example:
    python studies/cube_finetune/cube_finetune.py --only finetune-10 scratch-10 &
    python studies/cube_finetune/cube_finetune.py --only finetune-100 scratch-100 &
    python studies/cube_finetune/cube_finetune.py --only references &
    wait; python studies/cube_finetune/cube_finetune.py --report studies/cube_finetune/results/cube_finetune.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from nerd.cli import check_json_output, run_main
from nerd.config import load_config
from nerd.errors import UserError
from nerd.evaluation import evaluate_passive
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.run_dir import clear_run_dir, write_text_atomic
from nerd.training import RUN_DIR_ENTRIES, TrainConfig, train

ROOT = Path(__file__).resolve().parents[2]
BASE_CFG = "cfg/train/CubeToss/cpu.yaml"
SCHEDULE = ["num_epochs=100000", "batches_per_epoch=20", "valid_batches=3", "best_checkpoint_by=valid_loss",
            "rollout_eval.num_envs=0"]
"""Shared by both recipes: the time budget ends the run; validation (on real data) picks the checkpoint."""
LEARNING_RATES = {"finetune": ["lr_start=3.0e-4", "lr_end=1.0e-5"], "scratch": ["lr_start=1.0e-3", "lr_end=1.0e-4"]}
"""Fine-tuning starts lower (it starts from a good model); from scratch uses the base recipe's schedule."""
EVAL_HORIZON = 100
TOSS_HORIZON = 74  # frames of the release's 0.5 s episode: one toss
REFERENCES = "references"
"""``--only references`` evaluates the sim-trained model and the mismatched simulator (no training) into
``<outdir>/references/record.json``, which ``--report`` then reuses."""


def run_names(counts: list[int]) -> list[str]:
    """Every training run of the study, e.g. ``finetune-10``, ``scratch-10``."""
    return [f"{recipe}-{n}" for n in counts for recipe in ("finetune", "scratch")]


def evaluate(model: str | None, env_mode: str, args: argparse.Namespace,
             evaluated_robot_variant: str | None = None) -> dict:
    """Held-out passive error against the "real" ground truth, at H = 74 (one toss) and 100."""
    results = evaluate_passive("CubeToss", model, env_mode, args.eval_rollouts, args.eval_rollouts, EVAL_HORIZON,
                               seed=500, progress=False, robot_variant="real",
                               evaluated_robot_variant=evaluated_robot_variant)
    curves = results["error_vs_step"]
    by_horizon = {str(h): {name: sum(values[:h]) / h for name, values in curves.items()}
                  for h in (TOSS_HORIZON, EVAL_HORIZON)}
    return {"metrics_by_horizon": by_horizon, "metrics_std_by_horizon": results["metrics_std_by_horizon"],
            "error_vs_step": curves, "num_rollouts": results["num_rollouts"]}


def run(name: str, args: argparse.Namespace) -> dict:
    """Train run ``name`` (``finetune-N`` or ``scratch-N``) and evaluate its best checkpoint; writes record.json."""
    recipe, count = name.split("-")
    overrides = [f"dataset.train={args.real_train}", f"dataset.valid={args.real_valid}",
                 f"dataset.max_train_trajectories={count}", f"time_budget_minutes={args.budget_minutes}",
                 *SCHEDULE, *LEARNING_RATES[recipe]]
    cfg = load_config(ROOT / BASE_CFG, TrainConfig, overrides)
    logdir = Path(args.outdir) / name
    clear_run_dir(logdir, (*RUN_DIR_ENTRIES, "record.json"))
    torch.set_num_threads(1)
    summary = train(cfg, logdir, seed=0, init_from=args.sim_model if recipe == "finetune" else None, progress=False)
    record = {"run": name, "recipe": recipe, "num_trajectories": int(count), "overrides": overrides,
              "init_from": args.sim_model if recipe == "finetune" else None,
              "cpu_minutes": summary["step_seconds"] / 60, "optimizer_steps": summary["optimizer_steps"],
              "epochs": len(summary["epochs"]), "best_valid_loss": summary["best_valid_loss"],
              "checkpoint": summary["best_checkpoint"], **evaluate(summary["best_checkpoint"], NEURAL, args)}
    write_text_atomic(logdir / "record.json", json.dumps(record, indent=2))
    print(f"{name}: {record['cpu_minutes']:.1f} CPU-min, {record['optimizer_steps']} steps, "
          f"H={TOSS_HORIZON} {record['metrics_by_horizon'][str(TOSS_HORIZON)]}", flush=True)
    return record


def references(args: argparse.Namespace) -> dict:
    """Evaluate the two simulators that see no real data: the sim-trained model and the mismatched simulator."""
    refs = {
        "sim-trained NeRD (no real data)": evaluate(args.sim_model, NEURAL, args),
        "mismatched analytical simulator ('sim' ground truth)": evaluate(None, GROUND_TRUTH, args, "sim"),
    }
    write_text_atomic(Path(args.outdir) / REFERENCES / "record.json", json.dumps(refs, indent=2))
    print(f"{REFERENCES}: " + ", ".join(f"{k} H={TOSS_HORIZON} {v['metrics_by_horizon'][str(TOSS_HORIZON)]}"
                                        for k, v in refs.items()), flush=True)
    return refs


def report(args: argparse.Namespace) -> None:
    """Gather the runs and the references (evaluated now unless ``--only references`` ran), write JSON + MD + PNG."""
    json_path, png_path = check_json_output(args.report, args.overwrite, ".png")
    md_path = json_path.with_suffix(".md")
    records = []
    for name in run_names(args.num_trajectories):
        path = Path(args.outdir) / name / "record.json"
        if not path.is_file():
            raise UserError(f"{path} is missing: run --only {name} first")
        records.append(json.loads(path.read_text()))
    cached = Path(args.outdir) / REFERENCES / "record.json"
    refs = json.loads(cached.read_text()) if cached.is_file() else references(args)
    out = {"protocol": {"ground_truth": "CubeToss variant 'real'", "eval_rollouts": args.eval_rollouts, "seed": 500,
                        "horizons": [TOSS_HORIZON, EVAL_HORIZON], "budget_minutes": args.budget_minutes,
                        "sim_model": args.sim_model, "real_train": args.real_train, "real_valid": args.real_valid},
           "references": refs, "runs": records}
    write_text_atomic(json_path, json.dumps(out, indent=2))
    write_text_atomic(md_path, markdown_table(out))
    plot(out, png_path)
    print(markdown_table(out))
    print(f"wrote {json_path}, {md_path} and {png_path}")


def _cells(entry: dict) -> list[str]:
    cells = []
    for h in (TOSS_HORIZON, EVAL_HORIZON):
        m, s = entry["metrics_by_horizon"][str(h)], entry["metrics_std_by_horizon"].get(str(h), {})
        for name in ("base_position_error", "base_orientation_error"):
            cells.append(f"{m[name]:.4f}" + (f" ± {s[name]:.4f}" if name in s and h == EVAL_HORIZON else ""))
    return cells


def markdown_table(out: dict) -> str:
    """One row per simulator: held-out position [m] and orientation [rad] errors at H = 74 and 100."""
    p = out["protocol"]
    lines = [f"Held-out 'real' tosses: {p['eval_rollouts']} rollouts, seed {p['seed']}; error averaged over all steps "
             f"1..H and rollouts (± std over rollouts of each rollout's mean, H = {EVAL_HORIZON}). Training runs: "
             f"{p['budget_minutes']} CPU-minutes each.", "",
             f"| simulator | real trajectories | position H={TOSS_HORIZON} [m] | orientation H={TOSS_HORIZON} [rad] "
             f"| position H={EVAL_HORIZON} [m] | orientation H={EVAL_HORIZON} [rad] | optimiser steps |",
             "|---|---|---|---|---|---|---|"]
    for name, entry in out["references"].items():
        lines.append(f"| {name} | 0 | " + " | ".join(_cells(entry)) + " | |")
    for r in sorted(out["runs"], key=lambda r: (r["num_trajectories"], r["recipe"])):
        label = "fine-tuned sim NeRD" if r["recipe"] == "finetune" else "NeRD from scratch"
        lines.append(f"| {label} | {r['num_trajectories']} | " + " | ".join(_cells(r)) + f" | {r['optimizer_steps']} |")
    return "\n".join(lines) + "\n"


def plot(out: dict, png_path: Path) -> None:
    """Position and orientation error against the step for every simulator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = dict(out["references"])
    for r in out["runs"]:
        entries[f"{'fine-tuned' if r['recipe'] == 'finetune' else 'from scratch'}, {r['num_trajectories']} real"] = r
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, (metric, unit) in zip(axes, (("base_position_error", "m"), ("base_orientation_error", "rad")),
                                  strict=True):
        for i, (name, entry) in enumerate(entries.items()):
            values = entry["error_vs_step"][metric]
            ax.plot(range(1, len(values) + 1), values, label=name, color=f"C{i}",
                    ls="--" if name in out["references"] else "-")
        ax.axvline(TOSS_HORIZON, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("step (1/148 s)")
        ax.set_ylabel(f"{metric} [{unit}]")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"CubeToss on held-out 'real' tosses ({out['protocol']['eval_rollouts']} rollouts): "
                 "error vs the real ground truth")
    fig.tight_layout()
    fig.savefig(png_path, dpi=90)
    plt.close(fig)


def main() -> None:
    """Parse the command line and run the selected training runs, or the report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sim-model", default="pretrained_models/NeRD_models/CubeToss/model.pt",
                        help="the sim-trained checkpoint")
    parser.add_argument("--real-train", default="data/CubeToss/train_real.hdf5", help="'real' training tosses")
    parser.add_argument("--real-valid", default="data/CubeToss/valid_real.hdf5", help="'real' validation tosses")
    parser.add_argument("--num-trajectories", type=int, nargs="+", default=[10, 100],
                        help="real training trajectories per run (the first N of --real-train)")
    parser.add_argument("--budget-minutes", type=float, default=3.0, help="CPU minutes of every training run")
    parser.add_argument("--eval-rollouts", type=int, default=512, help="held-out real tosses evaluated")
    parser.add_argument("--outdir", default="runs/cube_finetune", help="directory of the training runs")
    parser.add_argument("--only", nargs="+", default=None, metavar="RUN",
                        help=f"train these runs, e.g. finetune-10, or '{REFERENCES}' (evaluate the two references)")
    parser.add_argument("--report", default=None, metavar="JSON", help="write the report (and .md, .png beside it)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    args = parser.parse_args()
    valid = run_names(args.num_trajectories)
    if args.only is None and args.report is None:
        raise UserError("give --only RUN... (training) and/or --report JSON")
    for name in args.only or []:
        if name not in (*valid, REFERENCES):
            raise UserError(f"unknown run '{name}'; valid: {', '.join(valid)}, {REFERENCES}")
    for name in args.only or []:
        if name == REFERENCES:
            references(args)
        else:
            run(name, args)
    if args.report:
        report(args)


if __name__ == "__main__":
    run_main(main)
