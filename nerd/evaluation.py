"""Passive-motion evaluation (spec §9): NeRD (or the ground truth itself) against the ground-truth simulator.

From the same random initial states, the ground truth and the evaluated simulator roll out autoregressively for H frames with zero
actions (through the robot's controller, so a PD-driven robot would still hold its pose). Errors are measured per step and averaged over
**all steps (1..h) and all trajectories**, per robot as its env module defines (``passive_metrics``), for H and for every standard
horizon h < H (:data:`REPORT_HORIZONS`), plus per-coordinate errors and the error of every metric at every step.

The initial states follow the release's protocol by default: the robot's data-generation sampler (spec §8 ranges,
``sample_initial_states``). ``initial_states="task"`` draws them from the robot's task reset (``sample_reset_states``) instead.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from envs import make_env
from nerd.frames import quat_angle, quat_inverse, quat_mul, wrap_angle
from nerd.neural_environment import NeuralEnvironment
from nerd.run_dir import write_text_atomic

INITIAL_STATES = ("data", "task")
"""Initial-state distributions of a passive evaluation: ``"data"`` the data-generation sampler (the release's protocol),
``"task"`` the robot's task reset."""

REPORT_HORIZONS = (100, 500, 1000)
"""Horizons whose errors are reported from every evaluation at least that long (the paper's: 100, 500 Ant, 1000 Cartpole)."""


def state_errors(gt: torch.Tensor, pred: torch.Tensor, env) -> dict[str, torch.Tensor]:
    """Per-step errors between two rollouts.

    Args:
        gt, pred: (..., dof_q + dof_qd) world-frame states.
        env: The environment (for ``passive_metrics``, ``continuous_q_indices`` and ``dof_q``).

    Returns:
        Each metric of ``env.passive_metrics`` (...,) and ``per_dof`` (..., dof_q): |dq| per coordinate,
        wrapped for continuous joints [m or rad].
    """
    dq = pred[..., : env.dof_q] - gt[..., : env.dof_q]
    if env.continuous_q_indices:
        idx = list(env.continuous_q_indices)
        dq[..., idx] = wrap_angle(dq[..., idx])
    errors = {"per_dof": dq.abs()}
    for name, (kind, indices) in env.passive_metrics.items():
        if kind == "abs":
            errors[name] = dq[..., list(indices)].abs().mean(-1)
        elif kind == "position":
            errors[name] = (pred[..., :3] - gt[..., :3]).norm(dim=-1)
        elif kind == "orientation":
            errors[name] = quat_angle(quat_mul(gt[..., 3:7], quat_inverse(pred[..., 3:7])))
        else:
            raise ValueError(f"unknown passive metric kind '{kind}' for {name}")
    return errors


def rollout(nenv: NeuralEnvironment, initial_states: torch.Tensor, horizon: int, env_mode: str) -> torch.Tensor:
    """Autoregressive passive rollout in ``env_mode`` from ``initial_states``: states (horizon + 1, N, S)."""
    nenv.set_env_mode(env_mode)
    nenv.reset(states=initial_states)
    actions = torch.zeros(nenv.num_envs, nenv.action_dim, device=nenv.torch_device)
    states = [nenv.get_states()]
    for _ in range(horizon):
        nenv.step(actions)
        states.append(nenv.get_states())
    return torch.stack(states)


def evaluate_passive(env_name: str, model_path: str | None, env_mode: str, num_envs: int, num_rollouts: int,
                     horizon: int, seed: int, contact_config: int | None = None, device: str = "cpu",
                     progress: bool = True, initial_states: str = "data",
                     mass_matrix_refresh: str | None = None) -> dict[str, Any]:
    """Passive-motion errors of ``env_mode`` against the ground truth over ``num_rollouts`` trajectories.

    Args:
        initial_states: One of :data:`INITIAL_STATES`: ``"data"`` (the release's protocol) or ``"task"``.
        mass_matrix_refresh: The ground truth's Featherstone mass-matrix refresh; None for the robot's default.

    Returns:
        A JSON-ready dict: settings, ``metrics`` (mean over all steps and trajectories), ``metrics_by_horizon``
        (the same means over steps 1..h for each h of :data:`REPORT_HORIZONS` below H, and H), ``per_dof`` means,
        ``error_vs_step`` (each metric averaged over trajectories, one value per step 1..H).
    """
    if num_envs < 1 or num_rollouts < 1 or horizon < 1:
        raise ValueError("--num-envs, --num-rollouts and --rollout-horizon must be positive")
    if initial_states not in INITIAL_STATES:
        raise ValueError(f"--initial-states must be one of {', '.join(INITIAL_STATES)}, got '{initial_states}'")
    if env_mode == "neural" and model_path is None:
        raise ValueError("--env-mode neural needs --model-path")
    num_envs = min(num_envs, num_rollouts)
    env = make_env(env_name, num_envs, device=device, contact_config=contact_config,
                   mass_matrix_refresh=mass_matrix_refresh)
    sample = env.env.sample_initial_states if initial_states == "data" else env.env.sample_reset_states
    nenv = (NeuralEnvironment.from_checkpoint(env, model_path, env_mode="ground-truth") if model_path
            else NeuralEnvironment(env, None, env_mode="ground-truth"))
    generator = torch.Generator().manual_seed(seed)
    sums: dict[str, torch.Tensor] = {}
    done = 0
    batches = math.ceil(num_rollouts / num_envs)
    for _ in tqdm(range(batches), desc=f"{env_name} {env_mode}", unit="batch", disable=not progress):
        initial = sample(num_envs, generator)
        gt = rollout(nenv, initial, horizon, "ground-truth")
        pred = rollout(nenv, initial, horizon, env_mode)
        keep = min(num_envs, num_rollouts - done)
        errors = state_errors(gt[1:, :keep], pred[1:, :keep], env)
        for name, value in errors.items():
            # Sum over trajectories, keep the step axis: (H,) or (H, dof_q).
            sums[name] = sums.get(name, 0) + value.double().sum(dim=1)
        done += keep
    per_step = {name: (value / done) for name, value in sums.items()}
    horizons = sorted({h for h in REPORT_HORIZONS if h < horizon} | {horizon})
    return {
        "env_name": env_name,
        "env_mode": env_mode,
        "model_path": str(model_path) if model_path else None,
        "num_rollouts": done,
        "rollout_horizon": horizon,
        "seed": seed,
        "contact_config": contact_config,
        "initial_states": initial_states,
        "mass_matrix_refresh": env.mass_matrix_refresh,
        "contact_friction": env.contact_friction,
        "metrics": {name: float(v.mean()) for name, v in per_step.items() if name != "per_dof"},
        "metrics_by_horizon": {
            str(h): {name: float(v[:h].mean()) for name, v in per_step.items() if name != "per_dof"} for h in horizons
        },
        "per_dof": per_step["per_dof"].mean(dim=0).tolist(),
        "error_vs_step": {name: v.tolist() for name, v in per_step.items() if name != "per_dof"},
    }


def format_results(results: dict[str, Any]) -> str:
    """A text table of the metrics of one evaluation."""
    by_horizon = results["metrics_by_horizon"]
    lines = [
        f"{results['env_name']} passive motion, {results['env_mode']} vs ground truth: "
        f"{results['num_rollouts']} rollouts x {results['rollout_horizon']} steps (seed {results['seed']}, "
        f"initial states: {results['initial_states']}"
        + (f", contact config {results['contact_config']})" if results["contact_config"] is not None else ")"),
        "mean over steps 1..H and rollouts",
        f"{'metric':<28}" + "".join(f"{'H=' + h:>12}" for h in by_horizon),
    ]
    lines += [f"{name:<28}" + "".join(f"{by_horizon[h][name]:>12.5f}" for h in by_horizon) for name in results["metrics"]]
    lines.append("per joint coordinate |dq|: " + ", ".join(f"{v:.5f}" for v in results["per_dof"]))
    return "\n".join(lines)


def format_config_table(runs: list[dict[str, Any]]) -> str:
    """A Markdown table with one row per ground configuration of several evaluations of one model."""
    names = list(runs[0]["metrics"])
    lines = ["| contact config | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for r in runs:
        lines.append(f"| {r['contact_config']} | " + " | ".join(f"{r['metrics'][n]:.4f}" for n in names) + " |")
    return "\n".join(lines)


def write_results(results: dict[str, Any], json_path: str | Path, png_path: str | Path | None = None) -> None:
    """Write the results as JSON and, optionally, a PNG of every metric against the step."""
    write_text_atomic(json_path, json.dumps(results, indent=2))
    if png_path is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = results["error_vs_step"]
    fig, axes = plt.subplots(1, len(curves), figsize=(4.5 * len(curves), 3.4), squeeze=False)
    for ax, (name, values) in zip(axes[0], curves.items()):
        ax.plot(range(1, len(values) + 1), values)
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{results['env_name']}: {results['env_mode']} vs ground truth ({results['num_rollouts']} rollouts)")
    fig.tight_layout()
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
