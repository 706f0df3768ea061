"""Play the NeRD release's published policies (Ant, ANYmal) in our ground truth, with the diagnostics to explain a gap.

Each policy plays ``num_games`` episodes (one per env, from the task's reset; deterministic actions) and the
report holds, per task: mean ± std episode reward against the paper's ground-truth reward, episode lengths and
the share of episodes that reach the time-out, the mean per-episode sum of every reward term, and the
observation statistics (over all steps of all live episodes) against the checkpoint's running mean/std, i.e.
what the policy saw in training. Entry point: ``eval/play_release_policies.py``.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np

from nerd.paths import REPO_ROOT
from nerd.rl.config import load_rl_config

PAPER_GROUND_TRUTH: dict[str, dict[str, tuple[float, float | None] | None]] = {
    "Ant": {"run": (2541.5, None), "spin": (2624.7, None), "spin_track": (1630.2, 203.1)},
    "Anymal": {"forward_walk": (1323.4, 60.5), "side_walk": (1360.2, 81.2)},
}
"""Ground-truth reward (mean, std or None) the paper reports for each published policy (Table 1 and, for
spin_track, its appendix; None: none given), by robot and task. The ANYmal numbers are the release's
scrambled-mass-matrix ground truth (variant ``release``)."""
ANT_TASKS = tuple(PAPER_GROUND_TRUTH["Ant"])
ROBOTS = tuple(PAPER_GROUND_TRUTH)


def policy_path(release_dir: str | Path, task: str, robot: str = "Ant") -> Path:
    """The published checkpoint of ``robot``'s task ``task`` under ``release_dir``:
    ``<release_dir>/<robot>/<task>/<robot>PPO.pth``."""
    return Path(release_dir) / robot / task / f"{robot}PPO.pth"


def play_release_policy(task: str, checkpoint: str | Path, num_games: int, num_envs: int, device: str = "cpu",
                        seed: int = 0, contact_friction: str | None = None, robot: str = "Ant",
                        robot_variant: str | None = None, episode_length: int | None = None) -> dict[str, Any]:
    """Play one published policy of ``robot`` in the ground truth; returns the report of the module docstring.

    ``episode_length`` shortens the task's episodes (tests); None keeps the task's (the paper's numbers)."""
    # The engine is imported here, so that the command line lists the robots and tasks without it.
    from nerd.rl.playback import evaluate_policy
    from nerd.rl.policy import load_policy, load_rl_games_checkpoint
    from nerd.rl.vec_env import make_vec_env

    cfg = load_rl_config(REPO_ROOT / "cfg" / "rl" / robot / f"{task}.yaml")
    cfg = copy.deepcopy(cfg)
    cfg.env.env_mode = "ground-truth"
    cfg.env.num_envs = min(num_envs, num_games)
    cfg.env.contact_friction = contact_friction
    cfg.env.robot_variant = robot_variant
    cfg.env.episode_length = episode_length or cfg.env.episode_length
    vec_env = make_vec_env(cfg.env, device, seed)
    act = load_policy(cfg, checkpoint, vec_env.get_env_info(), device)
    model = load_rl_games_checkpoint(checkpoint)["model"]
    started = time.perf_counter()
    result = evaluate_policy(vec_env, act, num_games, seed)
    lengths = np.asarray(result["episode_lengths"])
    obs_mean, ckpt_mean = np.asarray(result["observation_mean"]), model["running_mean_std.running_mean"].cpu().numpy()
    ckpt_std = np.sqrt(model["running_mean_std.running_var"].cpu().numpy())
    paper = PAPER_GROUND_TRUTH[robot][task]
    paper_mean, paper_std = (None, None) if paper is None else paper
    return {
        "robot": robot, "robot_variant": vec_env.nenv.env.robot_variant, "task": task, "checkpoint": str(checkpoint),
        "seed": seed, "contact_friction": vec_env.nenv.env.contact_friction,
        "paper_ground_truth": paper_mean, "paper_ground_truth_std": paper_std,
        "relative_to_paper": None if paper is None else (result["mean_reward"] - paper_mean) / paper_mean,
        "full_length_share": float((lengths >= vec_env.episode_length).mean()),
        "checkpoint_mean": ckpt_mean.tolist(), "checkpoint_std": ckpt_std.tolist(),
        "observation_mean_z": ((obs_mean - ckpt_mean) / ckpt_std).tolist(),
        "seconds": time.perf_counter() - started, **result,
    }


def format_report(results: list[dict[str, Any]]) -> str:
    """Markdown table: one row per policy and setting."""
    lines = ["| robot / task | variant | friction | episodes | reward (mean ± std) | paper GT | ours / paper − 1 | "
             "mean length | full-length share | per-episode reward terms | max abs obs z |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        paper = "—" if res["paper_ground_truth"] is None else f"{res['paper_ground_truth']:.1f}"
        if res.get("paper_ground_truth_std") is not None:
            paper += f" ± {res['paper_ground_truth_std']:.1f}"
        rel = "—" if res["relative_to_paper"] is None else f"{100 * res['relative_to_paper']:+.1f} %"
        terms = ", ".join(f"{k} {v:.0f}" for k, v in res["reward_terms"].items())
        z = max(abs(v) for v in res["observation_mean_z"])
        variant = res.get("robot_variant") or "—"
        lines.append(f"| {res.get('robot', 'Ant')} / {res['task']} | {variant} | {res['contact_friction']} | "
                     f"{res['num_games']} | {res['mean_reward']:.1f} ± {res['std_reward']:.1f} | {paper} | {rel} | "
                     f"{res['mean_length']:.1f} | "
                     f"{100 * res['full_length_share']:.0f} % | {terms} | {z:.2f} |")
    return "\n".join(lines)
