"""Batch policy evaluation (the paper's Table 1): several policies x several simulators -> one table.

Every policy (typically one PPO seed each) plays ``num_games`` episodes in every simulator from the same
initial states (the vec env's reset stream is reseeded with ``seed`` before each evaluation). The table holds
mean ± std episode reward per simulator and the relative gap (neural − GT) / |GT| of the means, per policy and
over all episodes of all policies pooled, and each cell's mean reward at every step of an episode (where in an
episode two simulators part); it is printed and written as JSON and Markdown, and the per-step reward of the pooled
row as a PNG. Episodes that ended in
a non-finite NeRD state are counted per cell (``num_diverged``, shown in the Markdown when not zero); a policy
whose episodes all diverge fails the evaluation (:func:`nerd.rl.playback.evaluate_policy`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from nerd.config import to_dict
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL, EnvMode
from nerd.rl.config import RLEnvConfig, load_rl_config
from nerd.rl.playback import evaluate_policy
from nerd.rl.policy import load_policy
from nerd.rl.vec_env import check_env_config, make_vec_env
from nerd.run_dir import write_text_atomic


@dataclass
class PolicyEvalConfig:
    """A batch evaluation. Relative paths are relative to the working directory of the command."""

    rl_cfg: str
    """RL config the policies were trained with (task and network)."""
    checkpoints: list[str]
    """rl-games policy checkpoints, e.g. one per training seed."""
    simulators: list[EnvMode] = field(default_factory=lambda: [GROUND_TRUTH, NEURAL])
    """Simulators to evaluate every policy in."""
    nerd_model_path: str | list[str] | None = None
    """NeRD checkpoint for the neural simulator, or several for their ensemble (default: the RL config's
    ``env.nerd_model_path``)."""
    policy_nerd_models: list[str | list[str]] | None = None
    """Per checkpoint, in their order, the NeRD model (or ensemble) that policy plays in, e.g. the last model of each
    seed's transfer loop, so that the seeds pool into one row; None: every policy plays in ``nerd_model_path``."""
    nerd_mirror: bool | None = None
    """Average each NeRD model's prediction with its mirror image's (our option; default: the RL config's
    ``env.nerd_mirror``)."""
    num_games: int = 2048
    """Episodes per policy and simulator."""
    num_envs: int = 2048
    """Parallel envs."""
    seed: int = 500
    """Seed of the initial states (the same for every policy and simulator)."""
    episode_length: int | None = None
    """Steps before a time-out; None keeps the RL config's (for quick checks, e.g. ``--cfg-overrides
    episode_length=20``)."""


def _stats(rewards: list[float]) -> dict[str, float]:
    r = np.asarray(rewards, dtype=np.float64)
    return {"mean": float(r.mean()), "std": float(r.std()), "num_games": len(r)}


def _pooled_per_step(results: list[dict[str, Any]]) -> dict[str, list]:
    """The mean reward at each step over the episodes of several evaluations running at that step, and how many
    ran (``reward_per_step``, ``episodes_per_step``)."""
    steps = max(len(r["reward_per_step"]) for r in results)
    sums, counts = np.zeros(steps), np.zeros(steps)
    for r in results:
        k = len(r["reward_per_step"])
        sums[:k] += np.asarray(r["reward_per_step"]) * np.asarray(r["episodes_per_step"])
        counts[:k] += r["episodes_per_step"]
    return {"reward_per_step": (sums / np.maximum(counts, 1)).tolist(),
            "episodes_per_step": counts.astype(int).tolist()}


def relative_gap(neural: float, gt: float) -> float | None:
    """(neural − GT) / |GT|, or None when GT is zero."""
    return None if gt == 0 else (neural - gt) / abs(gt)


def _policy_env_config(cfg: PolicyEvalConfig, env_cfg: RLEnvConfig, index: int) -> RLEnvConfig:
    """The simulator checkpoint ``index`` plays in: in NeRD, its own model where the config gives one per policy."""
    if env_cfg.env_mode != NEURAL or cfg.policy_nerd_models is None:
        return env_cfg
    return replace(env_cfg, nerd_model_path=cfg.policy_nerd_models[index])


def batch_evaluate(cfg: PolicyEvalConfig, device: str = "cpu", progress: bool = True) -> dict[str, Any]:
    """Evaluate every checkpoint in every simulator; returns the JSON-ready table (see :func:`format_markdown`)."""
    if not cfg.checkpoints:
        raise UserError("the eval config lists no checkpoints")
    if not cfg.simulators:
        raise UserError("the eval config lists no simulators")
    for path in cfg.checkpoints:
        if not Path(path).is_file():
            raise FileNotFoundError(f"policy checkpoint not found: {path}")
    if cfg.policy_nerd_models is not None:
        if cfg.nerd_model_path is not None:
            raise UserError("the eval config sets both nerd_model_path and policy_nerd_models: keep one")
        if len(cfg.policy_nerd_models) != len(cfg.checkpoints):
            raise UserError(f"policy_nerd_models lists {len(cfg.policy_nerd_models)} models for "
                            f"{len(cfg.checkpoints)} checkpoints: give one per checkpoint, in their order")
    rl_cfg = load_rl_config(cfg.rl_cfg)
    rl_cfg.env.num_envs = min(cfg.num_envs, cfg.num_games)
    if cfg.nerd_model_path is not None:
        rl_cfg.env.nerd_model_path = cfg.nerd_model_path
    if cfg.nerd_mirror is not None:
        rl_cfg.env.nerd_mirror = cfg.nerd_mirror
    if cfg.episode_length is not None:
        rl_cfg.env.episode_length = cfg.episode_length
    env_cfgs = {}
    for simulator in dict.fromkeys(cfg.simulators):
        env_cfg = rl_cfg.env.for_evaluation()  # the task's own reward, without a training-time penalty
        env_cfg.env_mode = simulator
        env_cfgs[simulator] = env_cfg
        for index in range(len(cfg.checkpoints)):
            check_env_config(_policy_env_config(cfg, env_cfg, index))  # every model, before any evaluation

    results: dict[str, list[dict[str, Any]]] = {sim: [] for sim in env_cfgs}  # evaluate_policy's, per checkpoint
    for simulator, env_cfg in env_cfgs.items():
        vec_env, built_for = None, None
        for index, path in enumerate(cfg.checkpoints):
            policy_env_cfg = _policy_env_config(cfg, env_cfg, index)
            if policy_env_cfg != built_for:  # one simulator per model (the previous one freed first)
                vec_env, built_for = None, None
                vec_env, built_for = make_vec_env(policy_env_cfg, device, cfg.seed), policy_env_cfg
            act = load_policy(rl_cfg, path, vec_env.get_env_info(), device)
            result = evaluate_policy(vec_env, act, cfg.num_games, cfg.seed, progress=progress,
                                     desc=f"{simulator}, policy {index + 1}/{len(cfg.checkpoints)}")
            results[simulator].append(result)
            if progress:
                note = f", {result['num_diverged']} diverged" if result["num_diverged"] else ""
                print(f"{simulator:>12}  {path}: {result['mean_reward']:.2f} ± {result['std_reward']:.2f} "
                      f"(length {result['mean_length']:.1f}{note})", flush=True)

    rows = []
    everyone = list(range(len(cfg.checkpoints)))
    for name, picked in [(path, [index]) for index, path in enumerate(cfg.checkpoints)] + [("all", everyone)]:
        row: dict[str, Any] = {"policy": name}
        if cfg.policy_nerd_models is not None and name != "all":
            row["nerd_model"] = cfg.policy_nerd_models[picked[0]]
        for simulator in env_cfgs:
            cells = [results[simulator][index] for index in picked]
            pooled = [r for cell in cells for r in cell["episode_rewards"]]
            pooled_lengths = [n for cell in cells for n in cell["episode_lengths"]]
            row[simulator] = {**_stats(pooled), "mean_length": float(np.mean(pooled_lengths)),
                              "num_diverged": sum(cell["num_diverged"] for cell in cells),
                              **_pooled_per_step(cells)}
        if GROUND_TRUTH in env_cfgs and NEURAL in env_cfgs:
            row["relative_gap"] = relative_gap(row[NEURAL]["mean"], row[GROUND_TRUTH]["mean"])
        rows.append(row)
    return {"config": to_dict(cfg), "robot": rl_cfg.env.robot, "task": rl_cfg.env.task,
            "simulators": list(env_cfgs), "rows": rows}


def format_markdown(table: dict[str, Any]) -> str:
    """The table as Markdown: one row per policy plus the pooled row."""
    sims = table["simulators"]
    has_gap = GROUND_TRUTH in sims and NEURAL in sims
    per_model = any("nerd_model" in row for row in table["rows"])
    header = (["policy"] + (["NeRD model"] if per_model else []) + [f"{sim} reward" for sim in sims]
              + (["gap (neural − GT) / abs(GT)"] if has_gap else []))
    lines = [f"{table['robot']} {table['task']}: mean ± std episode reward over "
             f"{table['rows'][0][sims[0]]['num_games']} episodes per policy (seed {table['config']['seed']})", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table["rows"]:
        cells = [f"**{row['policy']}**" if row["policy"] == "all" else row["policy"]]
        if per_model:
            model = row.get("nerd_model", "")
            cells.append(", ".join(model) if isinstance(model, list) else model)
        cells += [f"{row[sim]['mean']:.1f} ± {row[sim]['std']:.1f}"
                  + (f" ({row[sim]['num_diverged']} diverged)" if row[sim].get("num_diverged") else "")
                  for sim in sims]
        if has_gap:
            gap = row["relative_gap"]
            cells.append("n/a" if gap is None else f"{100 * gap:+.1f} %")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_table(table: dict[str, Any], json_path: str | Path, overwrite: bool = True) -> Path:
    """Write the table as JSON at ``json_path``, as Markdown beside it (``.md``) and, for a table with per-step
    rewards, their plot (``.png``: the pooled row, one line per simulator); returns the Markdown path.
    Without ``overwrite``, files that another process wrote meanwhile are an error, not replaced."""
    json_path = Path(json_path)
    md_path = json_path.with_suffix(".md")
    write_text_atomic(json_path, json.dumps(table, indent=2), overwrite)
    write_text_atomic(md_path, format_markdown(table) + "\n", overwrite)
    if table["rows"] and all("reward_per_step" in table["rows"][-1][sim] for sim in table["simulators"]):
        _plot_reward_per_step(table, json_path.with_suffix(".png"))
    return md_path


def _plot_reward_per_step(table: dict[str, Any], png_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pooled = table["rows"][-1]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for simulator in table["simulators"]:
        cell = pooled[simulator]
        ax.plot(range(1, len(cell["reward_per_step"]) + 1), cell["reward_per_step"],
                label=f"{simulator}: episode reward {cell['mean']:.1f} ± {cell['std']:.1f}")
    ax.set_xlabel("step of the episode")
    ax.set_ylabel("mean reward at the step")
    ax.set_title(f"{table['robot']} {table['task']}: {pooled[table['simulators'][0]]['num_games']} episodes per "
                 f"simulator (seed {table['config']['seed']})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
