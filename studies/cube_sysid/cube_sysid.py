"""Identify CubeToss's contact material from a few "real" tosses through the differentiable ground truth, and
compare the identified simulator with the NeRD fine-tune of ``studies/cube_finetune`` on the same held-out tosses.

The "real" tosses are CubeToss's ``real`` variant (:mod:`nerd.envs.cube_toss`: contact ke 3e4, kd 1e2, mu 0.3); the
analytical model starts from the ``sim`` variant's material (ke 1e4, kd 1e3, mu 0.15), the mismatched simulator of
the fine-tuning study. The unknowns are the log-scales x = log(value / sim value) of the three material constants
(cube and ground alike; kf stays 50), kept in the box ``--bounds``.

The loss is multiple shooting: every toss (the first N trajectories of ``--real-train``, the fine-tune's data) is
cut into windows of ``--window`` frames over its first ``--frames`` frames; each window is rolled out from the
recorded state at its start (velocities included) and compared with the recorded poses (position [m] and
quaternion components), mean squared. Gradients through one whole toss (74 frames x 20 substeps of a stiff contact)
explode (about 1e21 at the sim material) and point the wrong way near the truth; over windows of 5 to 15 frames they
point to the truth (docs/neuralsim.md, part 4). The optimiser is Adam on x (:func:`nerd.sysid.descend`), started at
the sim material (x = 0), ``--iterations`` batched rollouts.

The identified simulator is evaluated as the fine-tuning study evaluates its models: ``--eval-rollouts`` held-out
tosses from the reset sampler (seed 500) against the real ground truth, position and orientation error averaged
over steps 1..74 (one toss) and 1..100; the mismatched simulator is evaluated again beside it. The fine-tuning
study's recorded rows (``--finetune-report``, same protocol) are copied into the table.

    python studies/cube_sysid/cube_sysid.py --output studies/cube_sysid/results/cube_sysid.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

from nerd.cli import make_parser, run_main, write_study_report
from nerd.errors import UserError

MATERIAL = ("ke", "kd", "mu")
METHODS = ("identify", "augment")
TOSS_HORIZON = 74  # frames of the release's 0.5 s episode: one toss
EVAL_HORIZON = 100
METRICS = ("base_position_error", "base_orientation_error")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The study's options; every default is the recorded run's."""
    parser = make_parser(__doc__)
    parser.add_argument("--real-train", default="data/CubeToss/train_real.hdf5", help="'real' training tosses")
    parser.add_argument("--num-trajectories", type=int, nargs="+", default=[10, 100],
                        help="real tosses per identification (the first N of --real-train)")
    parser.add_argument("--frames", type=int, default=TOSS_HORIZON, help="frames of each toss that are fitted")
    parser.add_argument("--window", type=int, default=5, help="frames of each shooting window")
    parser.add_argument("--iterations", type=int, default=60, help="Adam steps (batched rollouts)")
    parser.add_argument("--lr", type=float, default=0.1, help="Adam's step on the log-scales (identify)")
    parser.add_argument("--augment-lr", type=float, default=1.0e-2, help="Adam's step on the network (augment)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="what is fitted")
    parser.add_argument("--seed", type=int, default=0, help="seed of the network's initial weights")
    parser.add_argument("--bounds", type=float, nargs=2, default=[-3.0, 3.0], metavar=("LOW", "HIGH"),
                        help="box of each log-scale")
    parser.add_argument("--eval-rollouts", type=int, default=512, help="held-out real tosses evaluated")
    parser.add_argument("--finetune-report", default="studies/cube_finetune/results/cube_finetune.json",
                        help="the fine-tuning study's report, whose rows are copied into the table ('' for none)")
    parser.add_argument("--output", default="outputs/cube_sysid.json", help="the report (.md, .png beside it)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    args = parser.parse_args(argv)
    for name in ("frames", "window", "iterations", "eval_rollouts"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if args.window > args.frames:
        raise UserError(f"--window {args.window} is longer than --frames {args.frames}")
    if not args.bounds[0] < 0.0 < args.bounds[1]:
        raise UserError(f"--bounds must contain 0 (the sim material), got {args.bounds}")
    if min(args.num_trajectories) < 1:
        raise UserError("--num-trajectories must be at least 1")
    return args


def material_values(x, sim_material: dict[str, float]) -> dict:
    """Model arrays of the contact material with log-scales ``x`` (3,) of the sim values (one copy: one shape)."""
    import torch

    return {f"shape_material_{k}": (sim_material[k] * torch.exp(x[i])).reshape(1) for i, k in enumerate(MATERIAL)}


def shooting_windows(args: argparse.Namespace, count: int):
    """Initial states (W, S) and recorded next states (W, window, S) of every window of the first ``count`` tosses."""
    import torch

    from nerd.datasets.hdf5 import load_trajectories, read_attrs

    attrs = read_attrs(args.real_train)
    if attrs.get("env_name") != "CubeToss" or attrs.get("robot_variant") != "real":
        raise UserError(f"{args.real_train} holds no 'real' CubeToss tosses (env {attrs.get('env_name')}, "
                        f"variant {attrs.get('robot_variant')})")
    if int(attrs["trajectory_length"]) < args.frames:
        raise UserError(f"{args.real_train}: trajectories of {attrs['trajectory_length']} frames, --frames "
                        f"{args.frames}")
    data = load_trajectories(args.real_train, ("states", "next_states"), 0, count)
    if len(data["states"]) < count:
        raise UserError(f"{args.real_train} holds {len(data['states'])} tosses, asked for {count}")
    states, following = torch.as_tensor(data["states"]), torch.as_tensor(data["next_states"])
    starts = range(0, args.frames - args.window + 1, args.window)
    return (torch.cat([states[:, s] for s in starts]),
            torch.cat([following[:, s: s + args.window] for s in starts]))


def fit(args: argparse.Namespace, method: str, count: int, sim_material: dict[str, float]) -> dict:
    """Fit the material's log-scales (``identify``) or a contact augmentation of the sim material (``augment``) to
    the first ``count`` tosses; returns the fit, its loss history and its cost."""
    import torch

    from nerd.diffsim import GroundTruthRollout
    from nerd.envs import make_env
    from nerd.hybrid import ContactForceAugmentation
    from nerd.sysid import descend

    initial, reference = shooting_windows(args, count)
    windows = len(initial)
    torch.manual_seed(args.seed)
    augmentation = ContactForceAugmentation() if method == "augment" else None
    sim = GroundTruthRollout(make_env("CubeToss", windows, robot_variant="sim", use_graph=False), augmentation)
    dof_q, zeros, history = sim.env.dof_q, torch.zeros(windows, args.window, 0), []

    def window_loss(values: dict | None = None) -> torch.Tensor:
        rollout = sim(initial, zeros, values)
        loss = ((rollout[..., :dof_q] - reference[..., :dof_q]) ** 2).mean()
        history.append(loss.item())
        return loss

    t0 = time.time()
    record: dict = {"method": method, "num_trajectories": count, "windows": windows}
    if method == "identify":
        low, high = torch.full((3,), args.bounds[0]), torch.full((3,), args.bounds[1])
        result = descend(lambda x: window_loss(material_values(x[0], sim_material)).reshape(1), torch.zeros(1, 3),
                         args.iterations, args.lr, low, high)
        x = result.params[0]
        record["material"] = {k: sim_material[k] * math.exp(float(x[i])) for i, k in enumerate(MATERIAL)}
        record.update(log_scales=x.tolist(), loss=float(result.loss[0]))
    else:
        optimiser = torch.optim.Adam(augmentation.parameters(), lr=args.augment_lr)
        best, best_loss = copy.deepcopy(augmentation.state_dict()), math.inf
        for _ in range(args.iterations):
            optimiser.zero_grad()
            loss = window_loss()
            if loss.item() < best_loss:
                best, best_loss = copy.deepcopy(augmentation.state_dict()), loss.item()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            if window_loss().item() < best_loss:
                best, best_loss = copy.deepcopy(augmentation.state_dict()), history[-1]
        augmentation.load_state_dict(best)
        record.update(loss=best_loss, weights={k: v.tolist() for k, v in best.items()})
    record.update(loss_history=history, seconds=time.time() - t0)
    print(f"{method}, {count} tosses ({windows} windows): loss {history[0]:.3g} -> {record['loss']:.3g}"
          + (f", {record['material']}" if "material" in record else "") + f" ({record['seconds']:.0f} s)",
          flush=True)
    return record, augmentation


def evaluate(args: argparse.Namespace, values: dict | None = None, augmentation=None) -> dict:
    """Held-out error of the sim-variant ground truth (with ``values`` of its model arrays, and ``augmentation``
    inside its contact law) against the real one."""
    from nerd.evaluation import evaluate_passive
    from nerd.modes import GROUND_TRUTH

    def setup(env) -> None:
        env.set_model_values(values or {})
        env.contact_augmentation = augmentation

    results = evaluate_passive("CubeToss", None, GROUND_TRUTH, args.eval_rollouts, args.eval_rollouts, EVAL_HORIZON,
                               seed=500, progress=False, robot_variant="real", evaluated_robot_variant="sim",
                               evaluated_setup=setup)
    curves = results["error_vs_step"]
    return {"metrics_by_horizon": {str(h): {name: sum(curves[name][:h]) / h for name in METRICS}
                                   for h in (TOSS_HORIZON, EVAL_HORIZON)},
            "error_vs_step": {name: curves[name] for name in METRICS}, "num_rollouts": results["num_rollouts"]}


def run_study(args: argparse.Namespace) -> dict:
    """Identify, and augment, from each number of tosses; evaluate every simulator on the held-out tosses."""
    from nerd.envs.cube_toss import ROBOT_VARIANTS

    sim_material, truth = ROBOT_VARIANTS["sim"], ROBOT_VARIANTS["real"]
    fits = []
    for method in args.methods:
        for count in args.num_trajectories:
            record, augmentation = fit(args, method, count, sim_material)
            values = None
            if method == "identify":
                record["relative_error"] = {k: record["material"][k] / truth[k] - 1.0 for k in MATERIAL}
                values = {f"shape_material_{k}": [v] for k, v in record["material"].items()}
            record["held_out"] = evaluate(args, values, augmentation)
            fits.append(record)
    mismatched = evaluate(args)
    finetune = []
    if args.finetune_report:
        path = Path(args.finetune_report)
        if not path.is_file():
            raise UserError(f"{path} is missing: run studies/cube_finetune first, or pass --finetune-report ''")
        recorded = json.loads(path.read_text())
        finetune = [{"run": r["run"], "recipe": r["recipe"], "num_trajectories": r["num_trajectories"],
                     "metrics_by_horizon": {h: {m: r["metrics_by_horizon"][h][m] for m in METRICS}
                                            for h in (str(TOSS_HORIZON), str(EVAL_HORIZON))}}
                    for r in recorded["runs"]]
    return {"config": {k: v for k, v in vars(args).items() if k not in ("output", "overwrite")},
            "truth": truth, "sim_material": sim_material, "fits": fits, "mismatched_simulator": mismatched,
            "finetune_rows": finetune}


LABELS = {"identify": "identified analytical simulator", "augment": "sim material + contact network (hybrid)"}


def _cells(metrics: dict) -> str:
    return " | ".join(f"{metrics[str(h)][m]:.4f}" for h in (TOSS_HORIZON, EVAL_HORIZON) for m in METRICS)


def table(report: dict) -> str:
    """The report's Markdown tables: the fits, then the held-out errors of every simulator."""
    c = report["config"]
    lines = [f"Fits to the first N 'real' tosses of {c['real_train']}: windows of {c['window']} frames over "
             f"{c['frames']} frames, {c['iterations']} Adam steps from the sim material. Truth: "
             + ", ".join(f"{k} {v:g}" for k, v in report["truth"].items()) + ".", "",
             "| fit | real tosses | ke | kd | mu | windows | window loss: start -> best | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for f in report["fits"]:
        if f["method"] == "identify":
            m, r = f["material"], f["relative_error"]
            material = " | ".join(f"{m[k]:.4g} ({r[k]:+.1%})" for k in MATERIAL)
        else:
            material = " | ".join(f"{report['sim_material'][k]:g}" for k in MATERIAL)
        lines.append(f"| {f['method']} | {f['num_trajectories']} | {material} | {f['windows']} | "
                     f"{f['loss_history'][0]:.3g} -> {f['loss']:.3g} | {f['seconds']:.0f} |")
    lines += ["", f"Held-out 'real' tosses ({c['eval_rollouts']}, seed 500): error averaged over steps 1..H.", "",
              f"| simulator | real tosses | position H={TOSS_HORIZON} [m] | orientation H={TOSS_HORIZON} [rad] | "
              f"position H={EVAL_HORIZON} [m] | orientation H={EVAL_HORIZON} [rad] |", "|---|---|---|---|---|---|",
              "| mismatched analytical simulator (sim material) | 0 | "
              f"{_cells(report['mismatched_simulator']['metrics_by_horizon'])} |"]
    for f in report["fits"]:
        lines.append(f"| {LABELS[f['method']]} | {f['num_trajectories']} | "
                     f"{_cells(f['held_out']['metrics_by_horizon'])} |")
    for r in sorted(report["finetune_rows"], key=lambda r: (r["num_trajectories"], r["recipe"])):
        label = "fine-tuned sim NeRD" if r["recipe"] == "finetune" else "NeRD from scratch"
        lines.append(f"| {label} (studies/cube_finetune) | {r['num_trajectories']} | "
                     f"{_cells(r['metrics_by_horizon'])} |")
    return "\n".join(lines) + "\n"


def plot(report: dict):
    """Left: each fit's window loss against Adam's step. Middle, right: held-out error against the step."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    curves = {"mismatched (sim material)": report["mismatched_simulator"]}
    for i, f in enumerate(report["fits"]):
        name = f"{f['method']}, {f['num_trajectories']} tosses"
        axes[0].plot(f["loss_history"], color=f"C{i + 1}", label=name)
        curves[name] = f["held_out"]
    if all(min(f["loss_history"]) > 0.0 for f in report["fits"]):
        axes[0].set_yscale("log")
    axes[0].set_xlabel("Adam step")
    axes[0].set_ylabel("window loss [m² + quaternion²]")
    axes[0].legend(fontsize=8)
    for ax, (metric, unit) in zip(axes[1:], (("base_position_error", "m"), ("base_orientation_error", "rad")),
                                  strict=True):
        for i, (name, entry) in enumerate(curves.items()):
            values = entry["error_vs_step"][metric]
            ax.plot(range(1, len(values) + 1), values, color=f"C{i}", label=name)
        ax.axvline(TOSS_HORIZON, color="grey", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("step (1/148 s)")
        ax.set_ylabel(f"{metric} [{unit}]")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    return fig


def main() -> None:
    """Parse the command line, run the study, write the report."""
    write_study_report(parse_args(), run_study, table, plot)


if __name__ == "__main__":
    run_main(main)
