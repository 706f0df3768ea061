"""Neural augmentation inside the analytical step against learning the whole dynamics (NeuralSim's joint-friction
experiment), across training-set sizes.

The "real" system is the contact-free double pendulum (PendulumWithContact, ground configuration 0) with viscous
joint friction ``--damping`` (Newton's ``joint_damping``, applied every substep); the analytical model has none.
Passive trajectories of ``--train-frames`` frames from the data generator's initial states are the training data
(``--sizes`` trajectories per run); held-out trajectories of ``--eval-frames`` frames from other initial states
measure the error inside the training horizon (frames 1..train-frames) and beyond it.

Models, each trained on the same windows of ``--window`` frames with the same loss (the mean squared error of the
state, in units of ``STATE_SCALE``, of a rollout from each window's first state) and Adam, for ``--iterations``
steps through the tape or ``--lstm-iterations`` cheap steps of the LSTM (about the same wall time):

* ``analytical``: the pendulum without friction (not trained);
* ``identified``: the analytical model with its joint damping fitted through the Warp tape (the right structure,
  two parameters: what system identification does when the missing physics is known);
* ``hybrid``: the analytical step plus :class:`nerd.hybrid.JointTorqueAugmentation`, a torque per joint from
  (q, q̇), trained through the tape with a sparse-group-lasso penalty on its inputs (``--lasso``);
* ``lstm``: an LSTM that predicts each frame's state change from the state, learning the whole dynamics;
* ``nerd``: a NeRD model (the pendulum's CPU architecture, ``cfg/train/PendulumWithContact/cpu.yaml``) trained by
  NeRD's own recipe (one-step targets over histories of 10) on the same trajectories written as a dataset
  (:class:`nerd.generation.GenerationConfig` with ``model_values`` = the damping), for ``--nerd-minutes`` of wall
  time, the checkpoint picked by the loss on 8 other damped trajectories; rolled out as the integrator does.

Writes the JSON, a Markdown table and a PNG (error against training transitions, inside and beyond the horizon):

    python studies/hybrid_friction/hybrid_friction.py --output studies/hybrid_friction/results/hybrid_friction.json
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path

from nerd.cli import make_parser, run_main, write_study_report
from nerd.errors import UserError

REPO = Path(__file__).resolve().parents[2]
MODELS = ("analytical", "identified", "hybrid", "lstm", "nerd")
NERD_CFG = "cfg/train/PendulumWithContact/cpu.yaml"
NERD_HISTORY = 10  # the history_length of NERD_CFG
STATE_SCALE = (1.0, 1.0, 5.0, 5.0)
"""Units of the loss per state coordinate (q0, q1 [rad], q̇0, q̇1 [rad/s]): rates run about 5x the angles."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The study's options; every default is the recorded run's."""
    parser = make_parser(__doc__)
    parser.add_argument("--damping", type=float, nargs=2, default=[20.0, 10.0], metavar=("D0", "D1"),
                        help="the reference's viscous joint friction [N·m·s/rad]")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 64],
                        help="training trajectories per run (each --train-frames frames)")
    parser.add_argument("--train-frames", type=int, default=60, help="frames of a training trajectory (60 Hz)")
    parser.add_argument("--eval-frames", type=int, default=240, help="frames of a held-out trajectory")
    parser.add_argument("--eval-trajectories", type=int, default=32, help="held-out trajectories")
    parser.add_argument("--window", type=int, default=10, help="frames of a training window's rollout")
    parser.add_argument("--batch", type=int, default=32, help="windows per step")
    parser.add_argument("--iterations", type=int, default=150, help="Adam steps of the models trained through the tape")
    parser.add_argument("--lstm-iterations", type=int, default=5000,
                        help="Adam steps of the LSTM (cheap steps: 5000 take about the hybrid's wall time)")
    parser.add_argument("--nerd-minutes", type=float, default=0.5,
                        help="wall minutes of optimiser steps of each NeRD training run (about a minute in all)")
    parser.add_argument("--lasso", type=float, default=1e-4, help="sparse-group-lasso weight of the hybrid")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="models to run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the training")
    parser.add_argument("--output", default="outputs/hybrid_friction.json", help="the report (.md, .png beside it)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    args = parser.parse_args(argv)
    for name in ("train_frames", "eval_frames", "eval_trajectories", "window", "batch", "iterations",
                 "lstm_iterations"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.sizes) < 1:
        raise UserError("--sizes must be at least 1")
    if args.window > args.train_frames:
        raise UserError(f"--window {args.window} is longer than a training trajectory (--train-frames "
                        f"{args.train_frames})")
    if "nerd" in args.models and args.train_frames < NERD_HISTORY:
        raise UserError(f"--train-frames {args.train_frames} is shorter than the NeRD model's history "
                        f"({NERD_HISTORY} frames)")
    if args.eval_frames < args.train_frames:
        raise UserError("--eval-frames must be at least --train-frames (the error beyond the horizon)")
    return args


class DynamicsLSTM:
    """The whole dynamics as an LSTM: each frame's state change from the states so far (torques are zero here)."""

    def __init__(self, state_dim: int, hidden: int = 64):
        import torch
        from torch import nn

        self.lstm = nn.LSTM(state_dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, state_dim)
        self.scale = torch.tensor(STATE_SCALE)
        self.modules = nn.ModuleList([self.lstm, self.head])

    def parameters(self):
        return self.modules.parameters()

    def rollout(self, initial_states, frames: int):
        import torch

        states, memory, out = initial_states, None, []
        for _ in range(frames):
            h, memory = self.lstm((states / self.scale)[:, None], memory)
            states = states + self.head(h[:, 0]) * self.scale / 10.0
            out.append(states)
        return torch.stack(out, dim=1)


def run_study(args: argparse.Namespace) -> dict:
    """Generate the data, train every model at every size, evaluate; returns the report's results."""
    import torch

    from nerd.diffsim import GroundTruthRollout
    from nerd.envs import make_env
    from nerd.hybrid import JointTorqueAugmentation, hybrid_rollout

    torch.manual_seed(args.seed)
    scale = torch.tensor(STATE_SCALE)
    damping = torch.tensor(args.damping)
    sims: dict[int, GroundTruthRollout] = {}

    def sim(n: int) -> GroundTruthRollout:
        if n not in sims:
            sims[n] = GroundTruthRollout(make_env("PendulumWithContact", n, contact_config=0, use_graph=False))
        return sims[n]

    def reference(initial, frames: int):
        with torch.no_grad():
            return sim(len(initial))(initial, torch.zeros(len(initial), frames, 2), {"joint_damping": damping})

    sampler = make_env("PendulumWithContact", 1, contact_config=0, use_graph=False)
    largest = max(args.sizes)
    train_start = sampler.sample_initial_states(largest, torch.Generator().manual_seed(args.seed))
    eval_start = sampler.sample_initial_states(args.eval_trajectories, torch.Generator().manual_seed(args.seed + 1))
    train_data = torch.cat([train_start[:, None], reference(train_start, args.train_frames)], dim=1)  # (n, T+1, S)
    eval_data = reference(eval_start, args.eval_frames)

    def windows(n: int, generator) -> tuple:
        """A batch of (first states, the next --window states) from the first n training trajectories."""
        last = args.train_frames - args.window
        traj = torch.randint(0, n, (args.batch,), generator=generator)
        first = torch.randint(0, last + 1, (args.batch,), generator=generator)
        rows = train_data[traj]
        idx = first[:, None] + torch.arange(args.window + 1)
        picked = rows[torch.arange(args.batch)[:, None], idx]
        return picked[:, 0], picked[:, 1:]

    def train(rollout, params, n: int, lr: float, penalty=None, iterations: int | None = None) -> float:
        optimiser = torch.optim.Adam(params, lr=lr)
        generator = torch.Generator().manual_seed(args.seed)
        started = time.perf_counter()
        for _ in range(iterations or args.iterations):
            start, target = windows(n, generator)
            optimiser.zero_grad()
            loss = (((rollout(start, args.window) - target) / scale) ** 2).mean()
            if penalty is not None:
                loss = loss + penalty()
            loss.backward()
            optimiser.step()
        return time.perf_counter() - started

    zeros = torch.zeros(args.batch, args.window, 2)
    frames_eval = torch.zeros(args.eval_trajectories, args.eval_frames, 2)

    def errors(rollout) -> dict:
        with torch.no_grad():
            predicted = rollout(eval_start, args.eval_frames)
        angle = (predicted[..., :2] - eval_data[..., :2]).abs().mean(dim=(0, 2))  # per frame
        return {"within_horizon_rad": float(angle[: args.train_frames].mean()),
                "beyond_horizon_rad": float(angle[args.train_frames:].mean()) if args.eval_frames > args.train_frames
                else None, "per_frame_rad": angle.tolist()}

    def fit(model: str, n: int) -> dict:
        """Train ``model`` on the first n training trajectories; its held-out errors (and what it learned)."""
        if model == "identified":
            value = torch.zeros(2, requires_grad=True)
            seconds = train(lambda x, h: sim(len(x))(x, zeros[:, :h], {"joint_damping": value}), [value], n, lr=1.0)
            row = errors(lambda x, h: sim(len(x))(x, frames_eval[: len(x), :h], {"joint_damping": value}))
            return {**row, "damping": value.detach().tolist(), "seconds": seconds}
        if model == "hybrid":
            augmentation = JointTorqueAugmentation(4, 2, hidden=(32, 32), output_scale=50.0,
                                                   input_scale=torch.tensor([3.0, 3.0, 10.0, 10.0]))
            seconds = train(lambda x, h: hybrid_rollout(sim(len(x)), augmentation, x, zeros[:, :h]),
                            list(augmentation.parameters()), n, lr=0.01,
                            penalty=lambda: augmentation.sparse_group_lasso(args.lasso, 0.1 * args.lasso))
            row = errors(lambda x, h: hybrid_rollout(sim(len(x)), augmentation, x, frames_eval[: len(x), :h]))
            probe = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
            with torch.no_grad():
                # The torque per unit rate of each joint at rest: -D if the augmentation learned the friction law.
                slope = (augmentation(probe) - augmentation(torch.zeros(1, 4))).T  # (joint, rate of joint)
            return {**row, "seconds": seconds, "input_importance": augmentation.input_importance().tolist(),
                    "torque_per_rate": slope.tolist()}
        if model == "nerd":
            return fit_nerd(n)
        lstm = DynamicsLSTM(4)
        seconds = train(lambda x, h: lstm.rollout(x, h), list(lstm.parameters()), n, lr=3e-3,
                        iterations=args.lstm_iterations)
        return {**errors(lambda x, h: lstm.rollout(x, h)), "seconds": seconds}

    workdir = tempfile.TemporaryDirectory(prefix="hybrid_friction_")

    @functools.cache
    def nerd_data() -> dict[str, str]:
        """The training trajectories (checked to be the study's) and 8 validation ones, as NeRD datasets."""
        from nerd.datasets.hdf5 import load_trajectories
        from nerd.generation import GenerationConfig, generate_dataset

        files = {}
        for name, count, seed in (("train", largest, args.seed), ("valid", 8, args.seed + 2)):
            cfg = GenerationConfig("PendulumWithContact", count * args.train_frames, args.train_frames, count, seed,
                                   passive=True, contact_config=0, model_values={"joint_damping": args.damping})
            files[name] = generate_dataset(cfg, Path(workdir.name) / f"{name}.hdf5", progress=False).path
        loaded = load_trajectories(files["train"], ("states", "next_states"))
        written = {k: torch.as_tensor(v) for k, v in loaded.items()}
        if not torch.allclose(torch.cat([written["states"][:, :1], written["next_states"]], dim=1), train_data,
                              atol=1e-5):
            raise RuntimeError("the NeRD dataset is not the study's training trajectories")
        return files

    def fit_nerd(n: int) -> dict:
        from nerd.config import load_config
        from nerd.diffsim import rollout_neural
        from nerd.training import TrainConfig, train

        files = nerd_data()
        cfg = load_config(REPO / NERD_CFG, TrainConfig, [
            f"dataset.train={files['train']}", f"dataset.valid={files['valid']}", f"dataset.max_train_trajectories={n}",
            f"time_budget_minutes={args.nerd_minutes}", "time_budget_clock=wall", "num_epochs=100000",
            "batches_per_epoch=20", "valid_batches=3",
            "best_checkpoint_by=valid_loss", "rollout_eval.num_envs=0"])
        # The recipe's batch, or every window of the smaller sets (51 per trajectory at history 10).
        cfg.batch_size = min(cfg.batch_size, n * (args.train_frames - cfg.history_length + 1))
        started = time.perf_counter()
        summary = train(cfg, Path(workdir.name) / f"nerd_{n}", seed=args.seed, progress=False)
        seconds = time.perf_counter() - started
        env = make_env("PendulumWithContact", args.eval_trajectories, contact_config=0, use_graph=False)
        row = errors(lambda x, h: rollout_neural(summary["best_checkpoint"], env, x, frames_eval[: len(x), :h]))
        return {**row, "seconds": seconds, "optimizer_steps": summary["optimizer_steps"]}

    results: dict[str, dict] = {}
    if "analytical" in args.models:
        results["analytical"] = {"all sizes": errors(lambda x, h: sim(len(x))(x, frames_eval[: len(x), :h]))}
        print(f"analytical: {results['analytical']['all sizes']['within_horizon_rad']:.4f} rad")
    for n in sorted(args.sizes):
        size = f"{n * args.train_frames} transitions"
        for model in (m for m in MODELS[1:] if m in args.models):
            results.setdefault(model, {})[size] = fit(model, n)
        print(f"{size}: " + ", ".join(f"{m} {r[size]['within_horizon_rad']:.4f}" for m, r in results.items()
                                      if size in r))
    return {"config": {k: v for k, v in vars(args).items() if k not in ("output", "overwrite")}, "results": results}


def table(report: dict) -> str:
    """The report's Markdown table: mean joint-angle error inside / beyond the training horizon."""
    c = report["config"]
    lines = [f"Double pendulum with joint friction {c['damping']} N·m·s/rad; training trajectories of "
             f"{c['train_frames']} frames, held-out ones of {c['eval_frames']}; mean joint-angle error [rad] inside "
             f"the training horizon / beyond it.", "",
             "| model | training transitions | inside | beyond | training seconds |", "|---|---|---|---|---|"]
    for model, rows in report["results"].items():
        for size, r in rows.items():
            beyond = f"{r['beyond_horizon_rad']:.4f}" if r["beyond_horizon_rad"] is not None else "–"
            seconds = f"{r['seconds']:.0f}" if "seconds" in r else "–"
            lines.append(f"| {model} | {size.split()[0] if size != 'all sizes' else '–'} | "
                         f"{r['within_horizon_rad']:.4f} | {beyond} | {seconds} |")
    hybrid = report["results"].get("hybrid")
    if hybrid:
        size, r = list(hybrid.items())[-1]
        lines += ["", f"The hybrid's inputs ({size}): first-layer group norms per output joint (q0, q1, q̇0, q̇1), "
                  "and its torque per unit rate at rest (the friction law would give -D):", ""]
        for j, (norms, slope) in enumerate(zip(r["input_importance"], r["torque_per_rate"], strict=True)):
            lines.append(f"- τ{j}: groups " + ", ".join(f"{v:.2f}" for v in norms) +
                         f"; dτ/dq̇0 {slope[0]:.1f}, dτ/dq̇1 {slope[1]:.1f}")
    return "\n".join(lines) + "\n"


def plot(report: dict):
    """The figure: error against training transitions, inside and beyond the horizon, one line per model."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in zip(axes, ("within_horizon_rad", "beyond_horizon_rad"), ("inside the horizon", "beyond"),
                              strict=True):
        for model, rows in report["results"].items():
            if "all sizes" in rows:
                if rows["all sizes"][key] is not None:
                    ax.axhline(rows["all sizes"][key], linestyle="--", color="grey", label=model)
                continue
            sizes = [int(s.split()[0]) for s in rows]
            values = [r[key] for r in rows.values()]
            if None not in values:
                ax.plot(sizes, values, marker="o", label=model)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training transitions")
        ax.set_ylabel("mean joint-angle error [rad]")
        ax.set_title(title)
        ax.legend()
    return fig


def main() -> None:
    """Parse the command line, run the study, write the report."""
    write_study_report(parse_args(), run_study, table, plot)


if __name__ == "__main__":
    run_main(main)
