"""Passive-motion evaluation: NeRD (or the ground truth itself) against the ground-truth simulator.

From the same random initial states, the ground truth and the evaluated simulator roll out autoregressively for H
frames with zero actions (through the robot's controller, so a PD-driven robot would still hold its pose). Errors are
measured per step and averaged over **all steps (1..h) and all trajectories**, per robot as its env module defines
(``passive_metrics``), for H and for every standard horizon h < H (:data:`REPORT_HORIZONS`), plus per-coordinate
errors and the error of every metric at every step.

The initial states follow the release's protocol by default: the robot's own random reset (``initial_states="task"``,
``sample_reset_states``, the distribution its RL tasks start from). The release's ``eval_passive_motion.py`` calls
``evaluate_action_mode(trajectory_source="sampler", passive=True)``, whose ``TrajectorySampler.
sample_trajectories_action_mode`` starts every trajectory from ``env.reset()`` (the env's random reset kernel), not
from the data-generation ranges. ``initial_states="data"`` draws from the robot's data-generation sampler (its
ranges, ``sample_initial_states``) instead: a far wider distribution (Cartpole x ±3.5 m and rates ±10 against ±1 m
and ±1), which was this project's default in its early versions.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from nerd.envs import make_env
from nerd.envs.environment import Environment
from nerd.errors import UserError
from nerd.frames import quat_angle, quat_inverse, quat_mul, wrap_angle
from nerd.integrator import NeRDEnsembleIntegrator
from nerd.models.nerd_model import NeRDModel
from nerd.modes import GROUND_TRUTH, INITIAL_STATES, NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.resources import check_memory
from nerd.run_dir import write_text_atomic

EXAMPLE_TRAJECTORIES = 3
"""Trajectories of the first batch kept (both simulators) for the PNG's NeRD-vs-ground-truth panels."""

REPORT_HORIZONS = (100, 500, 1000)
"""Horizons whose errors are reported from every evaluation at least that long (the paper's: 100, 500 Ant,
1000 Cartpole)."""


def initial_state_sampler(env, initial_states: str):
    """The sampler ``(n, generator) -> (n, state_dim)`` that :data:`INITIAL_STATES` name ``initial_states`` means
    for ``env``: its data-generation sampler (``"data"``), its task reset (``"task"``) or its near-limit starts
    (``"limits"``)."""
    samplers = {"task": env.sample_reset_states, "data": env.sample_initial_states, "limits": env.sample_limit_states}
    if initial_states not in INITIAL_STATES:
        raise UserError(f"--initial-states must be one of {', '.join(INITIAL_STATES)}, got '{initial_states}'")
    return samplers[initial_states]


def metric_units(env) -> dict[str, str]:
    """Unit of each of ``env``'s passive metrics: m for positions, rad for orientations, and for joint errors the
    unit of the first scored coordinate (m for a prismatic joint, rad for a hinge)."""
    by_kind = {"position": "m", "orientation": "rad", "end_effector": "m"}
    names = env.state_names()
    return {name: by_kind.get(kind) or names[indices[0]].partition("[")[2].rstrip("]")
            for name, (kind, indices) in env.passive_metrics.items()}


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
        elif kind == "end_effector":
            errors[name] = (env.end_effector_position(pred) - env.end_effector_position(gt)).norm(dim=-1)
        else:
            raise ValueError(f"unknown passive metric kind '{kind}' for {name}")
    return errors


def rollout(nenv: NeuralEnvironment, initial_states: torch.Tensor, horizon: int, env_mode: str,
            on_step: Callable[[], Any] | None = None) -> torch.Tensor:
    """Autoregressive passive rollout in ``env_mode`` from ``initial_states``: states (horizon + 1, N, S).

    ``on_step`` is called after every step (a progress bar's ``update``).
    """
    nenv.set_env_mode(env_mode)
    nenv.reset(states=initial_states)
    actions = torch.zeros(nenv.num_envs, nenv.action_dim, device=nenv.torch_device)
    states = [nenv.get_states()]
    for _ in range(horizon):
        nenv.step(actions)
        states.append(nenv.get_states())
        if on_step is not None:
            on_step()
    nenv.check_diverged()  # the frames since the last read of a captured frame's NaN flags
    return torch.stack(states)


def evaluate_passive(env_name: str, model_path: str | Sequence[str] | NeRDModel | None, env_mode: str, num_envs: int,
                     num_rollouts: int, horizon: int, seed: int, contact_config: int | None = None, device: str = "cpu",
                     progress: bool = True, initial_states: str = INITIAL_STATES[0],
                     mass_matrix_refresh: str | None = None, robot_variant: str | None = None,
                     control_mode: str | None = None, compile_model: bool = False,
                     evaluated_robot_variant: str | None = None, mirror: bool = False,
                     size_flags: str = "--num-envs, --num-rollouts or --rollout-horizon", data_margin: float = 0.1,
                     strict_data_range: bool = False, history_length: int = 10,
                     evaluated_setup: Callable[[Environment], None] | None = None,
                     capture_frame: bool = False) -> dict[str, Any]:
    """Passive-motion errors of ``env_mode`` against the ground truth over ``num_rollouts`` trajectories.

    Args:
        model_path: The NeRD checkpoint, or several: an ensemble that steps with their mean prediction
            (:class:`~nerd.integrator.NeRDEnsembleIntegrator`, our option); or a model object (a training run's
            per-epoch check), which is put in eval mode on ``device``: pass a copy of one that goes on training.
        history_length: The history of a model object (a checkpoint states its own).
        initial_states: One of :data:`INITIAL_STATES`: ``"task"`` (the release's protocol) or ``"data"``.
        mass_matrix_refresh: The ground truth's Featherstone mass-matrix refresh; None for the robot's default.
        robot_variant: The ground truth's variant (``Environment.robot_variants``: Anymal ``"physical"`` or
            ``"release"``, CubeToss ``"sim"`` or ``"real"``); None for the robot's default.
        control_mode: Controller of robots with several (Anymal, Franka) that turns the zero actions into
            torques; None for the robot's default.
        compile_model: ``torch.compile`` the NeRD model's per-step prediction (see :class:`NeuralEnvironment`).
        capture_frame: Replay each neural frame as one CUDA graph (see :class:`NeuralEnvironment`; a divergence is
            then raised up to :data:`~nerd.neural_environment.NAN_CHECK_FRAMES` frames late).
        mirror: Average each model's prediction with that of the robot's mirror image (our option, see
            :class:`NeuralEnvironment`).
        size_flags: What a too-large request tells the user to lower (the caller's names for the sizes).
        data_margin: In neural mode with a model that keeps its training data's range, count the steps whose inputs
            lie beyond that range by more than this fraction of it (``outside_data`` in the results).
        strict_data_range: Raise a UserError at the first step that leaves the range (with ``data_margin``)
            instead of counting.
        evaluated_robot_variant: In ground-truth mode, evaluate *another* variant's ground truth against it (e.g. the
            CubeToss ``"sim"`` simulator against its ``"real"`` data: the error of a mismatched analytical model);
            None evaluates the same variant. In neural mode the model is the dynamics; a model of another variant
            is accepted only where the robot's variants are interchangeable (CubeToss).
        evaluated_setup: In ground-truth mode, evaluate a second ground truth (of ``evaluated_robot_variant`` or the
            same variant) that this call changes before its first frame, against the unchanged one: e.g. an
            identified contact material (:meth:`~nerd.envs.environment.Environment.set_model_values`) or a hybrid
            simulator's ``contact_augmentation``.

    Returns:
        A JSON-ready dict: settings, ``metrics`` (mean over all steps and trajectories), ``metrics_by_horizon``
        (the same means over steps 1..h for each h of :data:`REPORT_HORIZONS` below H, and H), ``metrics_std`` and
        ``metrics_std_by_horizon`` (standard deviation over trajectories of each trajectory's mean error),
        ``per_dof`` means, ``error_vs_step`` (each metric averaged over trajectories, one value per step 1..H),
        ``env_steps_per_second`` of both simulators (env count x steps / wall time of their rollouts) and
        ``example_trajectories`` (joint coordinates of the first :data:`EXAMPLE_TRAJECTORIES` rollouts in both
        simulators, for plots; :func:`write_results` leaves them out of the JSON); for an ensemble also
        ``ensemble_disagreement`` (:attr:`~nerd.integrator.NeRDEnsembleIntegrator.disagreement`: its mean, its
        mean over rollouts per step, and the rank correlation of each rollout's mean disagreement with its mean
        error over steps 1..H, per metric).
    """
    if num_envs < 1 or num_rollouts < 1 or horizon < 1:
        raise UserError(f"{size_flags.replace(' or ', ' and ')} must be positive")
    if env_mode == NEURAL and model_path is None:
        raise UserError("--env-mode neural needs --model-path")
    if evaluated_robot_variant is not None and env_mode != GROUND_TRUTH:
        raise UserError("--evaluated-robot-variant compares two ground truths: it needs --env-mode ground-truth")
    if evaluated_setup is not None and env_mode != GROUND_TRUTH:
        raise UserError("evaluated_setup changes a second ground truth: it needs env_mode ground-truth")
    num_envs = min(num_envs, num_rollouts)
    horizons = sorted({h for h in REPORT_HORIZONS if h < horizon} | {horizon})
    # Lower bounds of what grows with the request (a one-env copy gives the state width), checked before any of
    # it is allocated: both simulators' rollouts of a batch, float32 and stacked once; per-trajectory means of at
    # least two metrics, float64.
    state_dim = make_env(env_name, 1, contact_config=contact_config, robot_variant=robot_variant).state_dim
    check_memory(3 * (horizon + 1) * num_envs * state_dim * 4 + 2 * len(horizons) * num_rollouts * 8,
                 f"evaluating {num_rollouts:,} rollouts of {horizon:,} steps in batches of {num_envs:,} envs",
                 device, f"lower {size_flags}")
    env = make_env(env_name, num_envs, device=device, contact_config=contact_config,
                   mass_matrix_refresh=mass_matrix_refresh, robot_variant=robot_variant, control_mode=control_mode)
    sample = initial_state_sampler(env, initial_states)
    if isinstance(model_path, NeRDModel):
        nenv = NeuralEnvironment(env, model_path, GROUND_TRUTH, history_length, compile_model, mirror, capture_frame)
    elif model_path:
        nenv = NeuralEnvironment.from_checkpoint(env, model_path, GROUND_TRUTH, compile_model, mirror, capture_frame)
    else:
        nenv = NeuralEnvironment(env, None, env_mode=GROUND_TRUTH)
    evaluated = nenv
    if evaluated_setup is not None or (evaluated_robot_variant is not None
                                       and evaluated_robot_variant != env.robot_variant):
        other = make_env(env_name, num_envs, device=device, contact_config=contact_config,
                         mass_matrix_refresh=mass_matrix_refresh,
                         robot_variant=evaluated_robot_variant or robot_variant, control_mode=control_mode)
        if evaluated_setup is not None:
            evaluated_setup(other)
        evaluated = NeuralEnvironment(other, None, env_mode=GROUND_TRUTH)
    generator = torch.Generator().manual_seed(seed)
    # On the rollouts' device, as the errors are: a CPU tensor here made every CUDA evaluation fail.
    last_steps = torch.tensor([h - 1 for h in horizons], device=env.torch_device)
    step_counts = torch.tensor(horizons, dtype=torch.float64, device=env.torch_device)[:, None]
    sums: dict[str, torch.Tensor] = {}
    done = 0
    batches = math.ceil(num_rollouts / num_envs)
    # Each trajectory's mean error over steps 1..h, per metric and reported horizon: the spread across trajectories.
    trajectory_means: dict[str, list[torch.Tensor]] = {}
    seconds = {"ground_truth": 0.0, "evaluated": 0.0}
    examples: dict[str, Any] = {}
    # An ensemble's disagreement per step (no ground truth needed): does it tell the rollouts that drift?
    ensemble = evaluated.integrator if (env_mode == NEURAL and isinstance(evaluated.integrator,
                                                                          NeRDEnsembleIntegrator)) else None
    disagreement_sum, disagreement_means, steps_disagreement = 0, [], []
    # Steps whose inputs left the model's training data: NeRD's numbers there are extrapolation.
    steps_outside: list[torch.Tensor] = []
    outside_shares: list[torch.Tensor] = []
    step_in_batch = [0]

    def evaluated_step() -> None:
        evaluated_bar.update()
        step_in_batch[0] += 1
        if ensemble is not None:
            steps_disagreement.append(ensemble.disagreement)
        outside = evaluated.outside_data(data_margin) if env_mode == NEURAL else None
        if outside is not None:
            steps_outside.append(outside)
            if strict_data_range and bool(outside.any()):
                raise UserError(f"{env_name}: at step {step_in_batch[0]} of a rollout, {int(outside.sum())} of "
                                f"{len(outside)} envs read inputs beyond the model's training data (margin "
                                f"{data_margin:g} of each input's range); NeRD extrapolates there")

    # Progress over steps, not batches: one batch of a long horizon takes minutes. One bar per simulator, each
    # counting its own steps (one step advances all num_envs rollouts of a batch by one frame).
    bars = [tqdm(total=batches * horizon, desc=f"{env_name} {label}", unit="step", mininterval=1.0, position=i,
                 disable=not progress) for i, label in enumerate(("ground truth", f"{env_mode} (evaluated)"))]
    gt_bar, evaluated_bar = bars
    for batch in range(batches):
        initial = sample(num_envs, generator)
        start = time.perf_counter()
        gt = rollout(nenv, initial, horizon, GROUND_TRUTH, on_step=gt_bar.update)
        middle = time.perf_counter()
        steps_disagreement.clear()
        steps_outside.clear()
        step_in_batch[0] = 0
        pred = rollout(evaluated, initial, horizon, env_mode, on_step=evaluated_step)
        seconds["ground_truth"] += middle - start
        seconds["evaluated"] += time.perf_counter() - middle
        for sim_bar, key in ((gt_bar, "ground_truth"), (evaluated_bar, "evaluated")):
            sim_bar.set_postfix(env_steps_per_s=f"{(batch + 1) * num_envs * horizon / seconds[key]:,.0f}")
        keep = min(num_envs, num_rollouts - done)
        errors = state_errors(gt[1:, :keep], pred[1:, :keep], env)
        for name, value in errors.items():
            # Sum over trajectories, keep the step axis: (H,) or (H, dof_q).
            sums[name] = sums.get(name, 0) + value.double().sum(dim=1)
            if name != "per_dof":
                cumulative = value.double().cumsum(dim=0)[last_steps]  # (len(horizons), keep)
                trajectory_means.setdefault(name, []).append(cumulative / step_counts)
        if steps_outside:
            outside_shares.append(torch.stack(steps_outside)[:, :keep].double().mean(dim=0))  # (keep,)
        if ensemble is not None:
            disagreement = torch.stack(steps_disagreement)[:, :keep].double()  # (H, keep)
            disagreement_sum = disagreement_sum + disagreement.sum(dim=1)
            disagreement_means.append(disagreement.mean(dim=0))
        if batch == 0:
            k = min(EXAMPLE_TRAJECTORIES, keep)
            examples = {"state_names": env.state_names()[: env.dof_q],
                        "ground_truth": gt[:, :k, : env.dof_q].transpose(0, 1).tolist(),
                        "evaluated": pred[:, :k, : env.dof_q].transpose(0, 1).tolist()}
        done += keep
    for sim_bar in bars:
        sim_bar.close()
    per_step = {name: (value / done) for name, value in sums.items()}
    spread = {name: torch.cat(chunks, dim=1).std(dim=1, correction=0) for name, chunks in trajectory_means.items()}
    steps = batches * num_envs * horizon
    units = metric_units(env)
    extra = {}
    if outside_shares:
        shares = torch.cat(outside_shares)
        extra["outside_data"] = {"margin": data_margin, "mean_share_of_steps": float(shares.mean()),
                                 "rollouts_outside": int((shares > 0).sum()), "num_rollouts": len(shares)}
    if ensemble is not None:
        # Each rollout's mean disagreement over steps 1..H against its mean error over the same steps.
        per_rollout = torch.cat(disagreement_means)
        extra["ensemble_disagreement"] = {
            "members": len(ensemble.members),
            "mean": float(per_rollout.mean()),
            "vs_step": (disagreement_sum / done).tolist(),
            "rank_correlation_with_error": {
                name: rank_correlation(per_rollout, torch.cat(chunks, dim=1)[-1])
                for name, chunks in trajectory_means.items()},
        }
    return {
        "env_name": env_name,
        "env_mode": env_mode,
        "model_path": (None if model_path is None or isinstance(model_path, NeRDModel)
                       else str(model_path) if isinstance(model_path, (str, Path))
                       else [str(path) for path in model_path]),
        "num_rollouts": done,
        "rollout_horizon": horizon,
        "seed": seed,
        "contact_config": contact_config,
        "initial_states": initial_states,
        "mirror": mirror,
        "mass_matrix_refresh": env.mass_matrix_refresh,
        "contact_friction": env.contact_friction,
        "robot_variant": env.robot_variant,
        "evaluated_robot_variant": evaluated.env.robot_variant,
        "evaluated_setup": evaluated_setup is not None,
        "control_mode": getattr(env, "control_mode", ""),
        "metrics": {name: float(v.mean()) for name, v in per_step.items() if name != "per_dof"},
        "metrics_by_horizon": {
            str(h): {name: float(v[:h].mean()) for name, v in per_step.items() if name != "per_dof"} for h in horizons
        },
        "metric_units": units,
        "metrics_std": {name: float(v[-1]) for name, v in spread.items()},
        "metrics_std_by_horizon": {str(h): {name: float(v[i]) for name, v in spread.items()}
                                   for i, h in enumerate(horizons)},
        "per_dof": per_step["per_dof"].mean(dim=0).tolist(),
        "error_vs_step": {name: v.tolist() for name, v in per_step.items() if name != "per_dof"},
        "env_steps_per_second": {name: steps / max(value, 1e-9) for name, value in seconds.items()},
        "example_trajectories": examples,
        **extra,
    }


def rank_correlation(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman's rank correlation of two 1-D samples (ties ranked by order; NaN for fewer than two values)."""
    if len(x) < 2:
        return float("nan")
    ranks = [torch.argsort(torch.argsort(v)).double() for v in (x, y)]
    return float(torch.corrcoef(torch.stack(ranks))[0, 1])


def format_results(results: dict[str, Any]) -> str:
    """A text table of the metrics of one evaluation."""
    by_horizon = results["metrics_by_horizon"]
    variants = ""
    if results.get("robot_variant"):
        evaluated = results.get("evaluated_robot_variant", results["robot_variant"])
        variants = (f" ('{evaluated}' vs '{results['robot_variant']}')" if results["env_mode"] == GROUND_TRUTH
                    else f" ('{results['robot_variant']}')")
    if results["env_mode"] == NEURAL and isinstance(results.get("model_path"), list):
        variants += f" (ensemble of {len(results['model_path'])} models)"
    if results.get("mirror"):
        variants += " (each model also mirrored)"
    lines = [
        f"{results['env_name']} passive motion, {results['env_mode']} vs ground truth{variants}: "
        f"{results['num_rollouts']} rollouts x {results['rollout_horizon']} steps (seed {results['seed']}, "
        f"initial states: {results['initial_states']}"
        + (f", contact config {results['contact_config']})" if results["contact_config"] is not None else ")"),
        "mean ± std over rollouts of each rollout's mean error over steps 1..H",
        f"{'metric':<28}" + "".join(f"{'H=' + h:>22}" for h in by_horizon),
    ]
    std = results.get("metrics_std_by_horizon")
    for name in results["metrics"]:
        cells = [f"{by_horizon[h][name]:.5f}" + (f" ± {std[h][name]:.5f}" if std else "") for h in by_horizon]
        lines.append(f"{name:<28}" + "".join(f"{cell:>22}" for cell in cells))
    lines.append("per joint coordinate |dq|: " + ", ".join(f"{v:.5f}" for v in results["per_dof"]))
    if "env_steps_per_second" in results:
        rates = results["env_steps_per_second"]
        lines.append(f"env-steps/s: ground truth {rates['ground_truth']:,.0f}, {results['env_mode']} "
                     f"{rates['evaluated']:,.0f}")
    if "ensemble_disagreement" in results:
        dis = results["ensemble_disagreement"]
        lines.append(f"ensemble disagreement (members' target spread / target std): mean {dis['mean']:.4f}; rank "
                     f"correlation of each rollout's mean with its error at H={results['rollout_horizon']}: "
                     + ", ".join(f"{name} {r:+.2f}" for name, r in dis["rank_correlation_with_error"].items()))
    if "outside_data" in results:
        out = results["outside_data"]
        lines.append(f"outside the model's training data (margin {out['margin']:g} of each input's range): "
                     f"{100 * out['mean_share_of_steps']:.1f} % of steps; {out['rollouts_outside']} of "
                     f"{out['num_rollouts']} rollouts left it")
    return "\n".join(lines)


def format_config_table(runs: list[dict[str, Any]]) -> str:
    """A Markdown table with one row per ground configuration of several evaluations of one model."""
    names = list(runs[0]["metrics"])
    lines = ["| contact config | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for r in runs:
        lines.append(f"| {r['contact_config']} | " + " | ".join(f"{r['metrics'][n]:.4f}" for n in names) + " |")
    return "\n".join(lines)


PLOTTED_COORDINATES = 4
"""Joint coordinates shown in the PNG's trajectory row: those with the largest mean error."""


def _without_examples(results: dict[str, Any]) -> dict[str, Any]:
    """The results without ``example_trajectories`` (at any depth): the JSON keeps statistics, not raw states."""
    return {key: _without_examples(value) if isinstance(value, dict) else value
            for key, value in results.items() if key != "example_trajectories"}


def write_results(results: dict[str, Any], json_path: str | Path, png_path: str | Path | None = None,
                  overwrite: bool = True) -> None:
    """Write the results as JSON and, optionally, a PNG: every metric's mean against the step, and below it a few
    trajectories of both simulators for the joint coordinates with the largest error. Without ``overwrite`` a JSON
    that another process wrote meanwhile is an error, not replaced (:func:`~nerd.run_dir.write_text_atomic`)."""
    write_text_atomic(json_path, json.dumps(_without_examples(results), indent=2), overwrite)
    if png_path is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = results["error_vs_step"]
    examples = results.get("example_trajectories") or {}
    coordinates = sorted(range(len(results["per_dof"])), key=lambda i: -results["per_dof"][i])[:PLOTTED_COORDINATES]
    coordinates = sorted(coordinates) if examples else []
    cols = max(len(curves), len(coordinates))
    rows = 2 if coordinates else 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, values) in zip(axes[0], curves.items(), strict=False):
        ax.plot(range(1, len(values) + 1), values)
        ax.set_xlabel("step")
        unit = results.get("metric_units", {}).get(name)
        ax.set_ylabel(f"{name} [{unit}]" if unit else name)
        ax.set_title(f"{name}, mean of {results['num_rollouts']} rollouts", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[0][len(curves):]:
        ax.axis("off")
    if coordinates:
        gt, pred = examples["ground_truth"], examples["evaluated"]
        for ax, i in zip(axes[1], coordinates, strict=False):
            for k in range(len(gt)):
                colour = f"C{k}"
                ax.plot([s[i] for s in gt[k]], color=colour, lw=1.2, label="ground truth" if k == 0 else None)
                ax.plot([s[i] for s in pred[k]], color=colour, lw=1.2, ls="--",
                        label=results["env_mode"] if k == 0 else None)
            ax.set_xlabel("step")
            ax.set_title(examples["state_names"][i], fontsize=9)
            ax.grid(alpha=0.3)
        axes[1][0].legend(fontsize=8)
        for ax in axes[1][len(coordinates):]:
            ax.axis("off")
    fig.suptitle(f"{results['env_name']}: {results['env_mode']} vs ground truth"
                 + (f" (bottom: {len(examples['ground_truth'])} rollouts, solid ground truth, dashed "
                    f"{results['env_mode']})" if coordinates else ""))
    fig.tight_layout()
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
