"""Playback of a trained policy by our own episode loop, in the ground truth or in NeRD, and its report.

The deterministic policy (the Gaussian's mean) runs over exactly ``num_games`` episodes: each batch resets every env
and counts only the first episode of each, so short episodes are not over-represented.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from nerd.errors import RolloutDivergedError, UserError
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.rl.config import RLConfig
from nerd.rl.policy import Policy, load_policy
from nerd.rl.vec_env import NeRDVecEnv, make_vec_env


@torch.no_grad()
def evaluate_policy(vec_env: NeRDVecEnv, act: Callable[[torch.Tensor], torch.Tensor], num_games: int,
                    seed: int | None = None, progress: bool = False, desc: str = "playback") -> dict[str, Any]:
    """Run ``num_games`` whole episodes of ``act`` in ``vec_env``.

    With ``progress`` a bar on stderr (``desc``) counts the finished episodes out of ``num_games``.

    Returns:
        ``episode_rewards`` and ``episode_lengths`` (lists, one per episode), their means and (population)
        standard deviations, ``num_games`` and ``num_diverged``, the episodes ended by a non-finite NeRD state
        (their reward stops there, so they pull the mean down: report them next to it); for diagnostics,
        ``reward_terms`` (each of the task's reward terms summed over an episode, mean over episodes) and
        ``observation_mean``/``observation_std`` (over every observation the policy acted on); ``reward_per_step``,
        the mean reward at each step of an episode over the episodes still running then (``episodes_per_step``:
        how many), which shows where in an episode two simulators part; in neural mode with
        a NeRD model that keeps its training data's range, ``outside_data``: the mean share of an episode's steps
        whose inputs left it (by the vec env's ``data_margin``) and how many episodes had any.

    Raises:
        RolloutDivergedError: If every episode diverged (the reward would be a meaningless 0 ± 0).
    """
    if num_games < 1:
        raise UserError(f"--num-games must be positive, got {num_games}")
    if seed is not None:
        vec_env.seed(seed)
    vec_env.track_outside_data = True
    outside_steps: list[float] = []  # per episode: the share of its steps beyond the model's training data
    returns: list[float] = []
    lengths: list[int] = []
    num_diverged = 0
    term_sums: dict[str, float] = {}
    obs_sum = obs_sq = obs_count = 0
    step_sums = np.zeros(0)  # per step of an episode: the reward summed over the episodes running then
    n = vec_env.num_envs
    bar = tqdm(total=num_games, desc=desc, unit="episode", mininterval=1.0, disable=not progress)
    while len(returns) < num_games:
        take = min(n, num_games - len(returns))
        obs = vec_env.reset()
        if isinstance(act, Policy):
            act.reset()  # every env starts an episode
        ret = torch.zeros(n, dtype=torch.float64, device=vec_env.device)
        length = torch.zeros(n, dtype=torch.long, device=vec_env.device)
        terms: dict[str, torch.Tensor] = {}
        active = torch.zeros(n, dtype=torch.bool, device=vec_env.device)
        diverged = torch.zeros(n, dtype=torch.bool, device=vec_env.device)
        outside = None
        per_step: list[torch.Tensor] = []  # this batch's step_sums, read once the batch ends
        active[:take] = True
        running = take  # episodes of this batch still running (one host read per step)
        while running:
            live = obs[active].double()
            obs_sum, obs_sq, obs_count = obs_sum + live.sum(0), obs_sq + (live**2).sum(0), obs_count + len(live)
            obs, rewards, dones, infos = vec_env.step(act(obs))
            for name, value in {"reward": rewards, **infos["reward_terms"]}.items():
                terms[name] = terms.get(name, 0) + torch.where(active, value.double(), 0.0)
            per_step.append(torch.where(active, rewards.double(), 0.0)[:take].sum())
            length += active.long()
            diverged |= active & infos["diverged"]
            if "outside_data" in infos:
                outside = (0 if outside is None else outside) + (active & infos["outside_data"]).long()
            active &= ~dones.bool()
            still = int(active.sum())
            bar.update(running - still)
            running = still
        ret = terms.pop("reward")
        batch_sums = torch.stack(per_step).cpu().numpy()
        step_sums = np.pad(step_sums, (0, max(0, len(batch_sums) - len(step_sums))))
        step_sums[: len(batch_sums)] += batch_sums
        returns += ret[:take].tolist()
        lengths += length[:take].tolist()
        num_diverged += int(diverged[:take].sum())
        if outside is not None:
            outside_steps += (outside[:take].double() / length[:take].clamp(min=1)).tolist()
        for name, value in terms.items():
            term_sums[name] = term_sums.get(name, 0.0) + float(value[:take].sum())
    bar.close()
    if num_diverged == len(returns):
        raise RolloutDivergedError(f"all {num_diverged} episodes diverged (non-finite NeRD states); the NeRD model "
                                   "cannot simulate this policy, so there is no reward to report")
    extra = {}
    if outside_steps:
        shares = np.asarray(outside_steps)
        extra["outside_data"] = {"margin": vec_env.data_margin, "mean_share_of_steps": float(shares.mean()),
                                 "episodes_outside": int((shares > 0).sum())}
    r, ln = np.asarray(returns), np.asarray(lengths, dtype=np.float64)
    # An episode of length L ran at steps 0..L-1.
    step_counts = (np.asarray(lengths)[:, None] > np.arange(len(step_sums))).sum(axis=0)
    obs_mean = obs_sum / obs_count
    obs_std = (obs_sq / obs_count - obs_mean**2).clamp(min=0).sqrt()
    return {"num_games": len(returns), "num_diverged": num_diverged, "mean_reward": float(r.mean()),
            "std_reward": float(r.std()), "mean_length": float(ln.mean()), "std_length": float(ln.std()),
            "reward_terms": {name: total / len(returns) for name, total in term_sums.items()},
            "reward_per_step": (step_sums / np.maximum(step_counts, 1)).tolist(),
            "episodes_per_step": step_counts.tolist(),
            "observation_mean": obs_mean.tolist(), "observation_std": obs_std.tolist(),
            "episode_rewards": returns, "episode_lengths": lengths, **extra}


def play_policy(cfg: RLConfig, checkpoint: str | Path, num_games: int, device: str = "cpu", seed: int = 0,
                num_envs: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Evaluate a checkpoint in ``cfg.env``'s simulator; returns :func:`evaluate_policy`'s summary + settings.

    ``num_envs`` (default: the config's) is capped at ``num_games``: every env plays one episode per batch.
    ``progress`` shows a bar of finished episodes on stderr.
    """
    cfg = copy.deepcopy(cfg)
    cfg.env = cfg.env.for_evaluation()
    cfg.env.num_envs = min(cfg.env.num_envs if num_envs is None else num_envs, num_games)
    vec_env = make_vec_env(cfg.env, device, seed)
    act = load_policy(cfg, checkpoint, vec_env.get_env_info(), device)
    result = evaluate_policy(vec_env, act, num_games, seed, progress=progress,
                             desc=f"{cfg.env.robot} {cfg.env.task} in {cfg.env.env_mode}")
    neural = cfg.env.env_mode == NEURAL
    return {"robot": cfg.env.robot, "task": cfg.env.task, "env_mode": cfg.env.env_mode,
            "nerd_model_path": cfg.env.nerd_model_path if neural else None,
            "nerd_mirror": neural and cfg.env.nerd_mirror,
            "checkpoint": str(checkpoint), "seed": seed, **result}


@torch.no_grad()
def show_policy(cfg: RLConfig, checkpoint: str | Path, device: str = "cpu", seed: int = 0, **view_args
                ) -> dict[str, Any]:
    """One episode of a checkpoint's policy in the ground truth and, when the config names a NeRD model, in NeRD
    next to it, from the same reset state (the seed's first); each copy acts on its own observations.

    ``view_args`` go to :func:`nerd.viewer.record` (viewer, output_path, video, video_size, progress).

    Returns:
        :func:`nerd.viewer.record`'s summary and ``episode_reward`` per copy (up to its first termination).
    """
    from nerd.viewer import GROUND_TRUTH_COLOR, NERD_COLOR, record

    cfg = copy.deepcopy(cfg)
    cfg.env = cfg.env.for_evaluation()
    cfg.env.num_envs = 1
    modes = [GROUND_TRUTH] + ([NEURAL] if cfg.env.nerd_model_path else [])
    vec_envs = []
    for mode in modes:
        cfg.env.env_mode = mode
        vec_envs.append(make_vec_env(cfg.env, device, seed))
    # One policy per copy: a recurrent one keeps each copy's hidden state apart.
    acts = [load_policy(cfg, checkpoint, vec_envs[0].get_env_info(), device) for _ in vec_envs]
    observations = [vec_env.reset() for vec_env in vec_envs]
    rewards = [0.0] * len(vec_envs)
    running = [True] * len(vec_envs)

    def advance() -> list[torch.Tensor]:
        for i, vec_env in enumerate(vec_envs):
            observations[i], reward, done, _ = vec_env.step(acts[i](observations[i]))
            if running[i]:
                rewards[i] += float(reward[0])
                running[i] = not bool(done[0])
        return [vec_env.nenv.get_body_q()[0] for vec_env in vec_envs]

    labels = ["ground truth", "NeRD"][: len(vec_envs)]
    shown = record(vec_envs[0].nenv.env, [GROUND_TRUTH_COLOR, NERD_COLOR][: len(vec_envs)], vec_envs[0].episode_length,
                   vec_envs[0].nenv.frame_dt, advance, [v.nenv.get_body_q()[0] for v in vec_envs], labels=labels,
                   **view_args)
    return {**shown, "episode_reward": dict(zip(labels, rewards, strict=False))}


def format_playback(result: dict[str, Any]) -> str:
    """One line: mean ± std episode reward and length, and how many episodes diverged (neural mode)."""
    diverged = (f"; {result['num_diverged']} of {result['num_games']} episodes diverged"
                if result["env_mode"] == NEURAL or result["num_diverged"] else "")
    outside = result.get("outside_data")
    outside = (f"; {100 * outside['mean_share_of_steps']:.1f} % of steps beyond the NeRD model's training data "
               f"({outside['episodes_outside']} of {result['num_games']} episodes)" if outside else "")
    return (f"{result['robot']} {result['task']} ({result['env_mode']}), {result['num_games']} episodes: "
            f"reward {result['mean_reward']:.2f} ± {result['std_reward']:.2f}, "
            f"length {result['mean_length']:.1f} ± {result['std_length']:.1f}{diverged}{outside}")
