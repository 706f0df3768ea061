"""Accuracy per CPU minute: train recipe variants at an equal CPU-time budget and evaluate each the same way.

Each variant is the base training config plus ``--cfg-overrides``-style entries, listed in a study YAML
(e.g. ``studies/accuracy_study/cartpole_accuracy.yaml``). A variant trains into ``<outdir>/<name>`` under
``time_budget_minutes`` of CPU time with one torch thread, then its ``best.pt`` is evaluated from the data
sampler's initial states (``initial_states="data"``, the project's protocol when the study ran; the release's own is
the task reset), zero actions, at every reported horizon. Every finished variant leaves ``<outdir>/<name>/study.json``;
``--table`` (re)writes the Markdown table of all finished variants, so variants can run in separate processes
(one per core) and be tabulated at the end.

Example (two variants side by side on two cores, then the table), from the repository root:
    S=studies/accuracy_study
    python $S/accuracy_study.py --study $S/cartpole_accuracy.yaml --only base &
    python $S/accuracy_study.py --study $S/cartpole_accuracy.yaml --only linear_skip &
    wait; python $S/accuracy_study.py --study $S/cartpole_accuracy.yaml --table docs/notebook/accuracy_table.md
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from nerd.cli import check_output, run_main
from nerd.config import ConfigError, load_config
from nerd.evaluation import evaluate_passive
from nerd.modes import NEURAL
from nerd.run_dir import clear_run_dir, write_text_atomic
from nerd.training import RUN_DIR_ENTRIES, TrainConfig, train


@dataclass
class StudyConfig:
    """A study: one base config, variants of it, one budget and one evaluation."""

    base_cfg: str
    """Training config every variant starts from (relative to the repository root)."""
    budget_minutes: float
    """CPU-time budget of every variant's training (``time_budget_minutes``)."""
    eval_rollouts: int = 512
    """Passive rollouts per variant (data-sampler initial states)."""
    eval_horizon: int = 1000
    """Rollout length; horizons 100, 500 below it are reported too."""
    variants: dict[str, list[str]] = field(default_factory=dict)
    """Variant name -> config overrides (``key.sub=value``) applied to the base config."""


def matmul_rate(threads: int, size: int = 1024, repeats: int = 20) -> float:
    """Measured float32 matmul rate of this machine with ``threads`` torch threads [FLOP/s]."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def run_variant(study: StudyConfig, name: str, root: Path, outdir: Path, threads: int, seed: int) -> dict:
    """Train and evaluate one variant; returns (and writes) its study record."""
    overrides = [*study.variants[name], f"time_budget_minutes={study.budget_minutes}"]
    cfg = load_config(root / study.base_cfg, TrainConfig, overrides)
    logdir = outdir / name
    clear_run_dir(logdir, (*RUN_DIR_ENTRIES, "study.json"))
    torch.set_num_threads(threads)
    summary = train(cfg, logdir, seed=seed, progress=False)
    start = time.perf_counter()
    results = evaluate_passive(cfg.env_name, summary["best_checkpoint"], NEURAL, study.eval_rollouts,
                               study.eval_rollouts, study.eval_horizon, seed=500, progress=False,
                               initial_states="data")
    params = summary["parameters"]
    windows_per_s = summary["windows_seen"] / max(summary["step_seconds"], 1e-9)
    # ~6 FLOPs per parameter per token for forward + backward (attention's own FLOPs are small at 10 tokens).
    flops = 6 * params * cfg.history_length * windows_per_s
    peak = matmul_rate(threads)
    record = {
        "variant": name, "overrides": study.variants[name], "base_cfg": study.base_cfg,
        "parameters": params, "windows_seen": summary["windows_seen"], "cpu_minutes": summary["step_seconds"] / 60,
        "wall_minutes": summary["train_seconds"] / 60, "windows_per_second": windows_per_s,
        "train_flops_per_second": flops, "matmul_flops_per_second": peak, "flops_share": flops / peak,
        "best_epoch_valid_loss": summary["best_valid_loss"], "best_checkpoint": summary["best_checkpoint"],
        "eval_rollouts": results["num_rollouts"], "eval_seconds": time.perf_counter() - start,
        "metrics_by_horizon": results["metrics_by_horizon"], "threads": threads, "seed": seed,
        "command": f"python studies/accuracy_study/accuracy_study.py --study {{study}} --only {name}",
    }
    write_text_atomic(logdir / "study.json", json.dumps(record, indent=2))
    return record


def format_table(records: list[dict], study_path: str) -> str:
    """Markdown table of finished variants, one row each."""
    horizons = sorted({h for r in records for h in r["metrics_by_horizon"]}, key=int)
    metrics = list(records[0]["metrics_by_horizon"][horizons[0]]) if records else []
    head = ["variant", "overrides", "params", "windows seen", "CPU min", "windows/s", "FLOP share", "best valid loss"]
    head += [f"{m} H={h}" for h in horizons for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        row = [r["variant"], "<br>".join(r["overrides"]) or "(base)", f"{r['parameters']:,}", f"{r['windows_seen']:,}",
               f"{r['cpu_minutes']:.1f}", f"{r['windows_per_second']:,.0f}", f"{100 * r['flops_share']:.0f} %",
               f"{r['best_epoch_valid_loss']:.4f}"]
        row += [f"{r['metrics_by_horizon'].get(h, {}).get(m, float('nan')):.4f}" for h in horizons for m in metrics]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(f"Each row: `python studies/accuracy_study/accuracy_study.py --study {study_path} --only <variant>`.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, help="study YAML (studies/accuracy_study/*.yaml)")
    parser.add_argument("--only", nargs="*", default=None, help="variants to run (default: all, one after another)")
    parser.add_argument("--outdir", default="runs/study", help="where the variants' runs go (default: runs/study)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per variant (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    parser.add_argument("--table", default=None, help="write the Markdown table of finished variants here and exit")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --table file")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    study = load_config(args.study, StudyConfig)
    outdir = Path(args.outdir) / Path(args.study).stem
    if args.table:
        check_output(args.table, args.overwrite)
        records = [json.loads((outdir / n / "study.json").read_text()) for n in study.variants
                   if (outdir / n / "study.json").is_file()]
        write_text_atomic(args.table, format_table(records, args.study) + "\n")
        print(f"wrote {args.table} ({len(records)} of {len(study.variants)} variants)")
        return
    names = args.only or list(study.variants)
    unknown = [n for n in names if n not in study.variants]
    if unknown:
        raise ConfigError(f"unknown variant(s) {', '.join(unknown)}; the study has {', '.join(study.variants)}")
    for name in names:
        record = run_variant(study, name, root, outdir, args.threads, args.seed)
        print(yaml.safe_dump({name: record["metrics_by_horizon"]}, sort_keys=False), flush=True)


if __name__ == "__main__":
    run_main(main)
