"""Ground-truth transitions where a policy goes, written as a NeRD training dataset (our option).

NeRD's data comes from random states and random torques (the release's sampler), and a policy trained in NeRD
finds the states and torque patterns that data holds too thinly, where the model is wrong in its favour. The loop
(:mod:`nerd.rl.transfer`) therefore rolls the current policy out in the ground truth, with its exploration noise,
and adds those transitions to the model's training data: better-than-random sampling, the NeRD authors' stated
future work.

The file has the layout and the robot signature of :func:`nerd.generation.generate_dataset`'s files (the same
fields, attributes and checks), so training reads it beside the model's own data. Episodes start from the task's
reset and run for the task's episode length; every ``trajectory_length`` frames the envs' last frames are written
as one trajectory each, and the envs whose episode ended (a termination or a time-out) start a new one. Frames
after a termination inside a trajectory are kept: they are the robot's true motion, only past where PPO's episode
stopped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from nerd.datasets.hdf5 import TrajectoryWriter
from nerd.errors import RolloutDivergedError, UserError
from nerd.generation import (
    dataset_attrs,
    dataset_field_shapes,
    finite_trajectories,
    gravity_directions,
    record_frame_inputs,
)
from nerd.modes import GROUND_TRUTH
from nerd.rl.config import RLConfig
from nerd.rl.policy import load_policy
from nerd.rl.tasks import task_class
from nerd.rl.vec_env import make_vec_env


@dataclass
class PolicyDataSummary:
    """What one collection wrote."""

    path: str
    num_trajectories: int
    num_transitions: int
    """Transitions written (frames of kept trajectories)."""
    simulated_transitions: int
    """Ground-truth frames simulated, dropped trajectories included: what the collection cost."""
    num_dropped: int
    episodes_started: int
    seconds: float


@torch.no_grad()
def collect_policy_data(cfg: RLConfig, checkpoint: str | Path, path: str | Path, num_transitions: int,
                        trajectory_length: int = 100, num_envs: int | None = None, stochastic: bool = True,
                        device: str = "cpu", seed: int = 0, progress: bool = True) -> PolicyDataSummary:
    """Roll ``checkpoint``'s policy out in the ground truth of ``cfg.env`` and write at most ``num_transitions``
    frames to the dataset ``path``: as many whole trajectories of ``trajectory_length`` as fit, a multiple of the
    env count (at least one batch of at least one env), so that nothing is simulated beyond what is written unless
    a trajectory diverges.

    Args:
        num_envs: Parallel envs; None: as many as whole episodes the budget holds (``num_transitions`` / frames per
            episode, at least one, at most the config's ``env.num_envs``), so that every part of an episode is seen.
        stochastic: Sample actions with the policy's exploration noise (as PPO does while it trains), or take its
            mean action.

    The file appears only once complete (:class:`~nerd.datasets.hdf5.TrajectoryWriter`).
    """
    if num_transitions < 1:
        raise UserError(f"num_transitions must be positive, got {num_transitions}")
    if trajectory_length < 1:
        raise UserError(f"trajectory_length must be positive, got {trajectory_length}")
    env_cfg = cfg.env.for_evaluation()
    env_cfg.env_mode = GROUND_TRUTH
    episode_steps = env_cfg.episode_length or task_class(env_cfg.robot, env_cfg.task).episode_length
    num_trajectories = max(1, num_transitions // trajectory_length)
    wanted = max(1, math.ceil(num_transitions / episode_steps)) if num_envs is None else num_envs
    n = min(cfg.env.num_envs if num_envs is None else num_envs, wanted, num_trajectories)
    # Whole batches of n trajectories: as few batches as n allows, with n shrunk to fill them evenly.
    env_cfg.num_envs = num_trajectories // math.ceil(num_trajectories / n)
    num_trajectories -= num_trajectories % env_cfg.num_envs
    vec_env = make_vec_env(env_cfg, device, seed)
    nenv, task, env = vec_env.nenv, vec_env.task, vec_env.nenv.env
    n, T, control_steps = vec_env.num_envs, trajectory_length, nenv.control_steps
    if T % control_steps:
        raise UserError(f"trajectory_length {T} must be a multiple of the robot's {control_steps} frames per action")
    frames_per_episode = vec_env.episode_length * control_steps
    policy = load_policy(cfg, checkpoint, vec_env.get_env_info(), device, stochastic=stochastic)
    torch.manual_seed(seed)  # the policy's exploration noise

    field_shapes = dataset_field_shapes(env)
    attrs = {**dataset_attrs(env), "trajectory_length": T, "seed": seed, "initial_states": "policy",
             "torque_scale": "", "torque_hold_frames": 1, "random_ground_planes": False, "ground_plane_rule": "",
             "policy_data": {"checkpoint": str(checkpoint), "robot": cfg.env.robot, "task": cfg.env.task,
                             "stochastic": stochastic, "num_envs": n, "episode_length": vec_env.episode_length}}
    buffers = {name: torch.empty(T, n, *shape, device=env.torch_device) for name, shape in field_shapes.items()}
    gravity = gravity_directions(env, n)
    writer = TrajectoryWriter(path, field_shapes, T, attrs)
    kept = dropped = simulated = 0
    started = time.perf_counter()
    vec_env.reset_envs(None)
    policy.reset()
    episodes = n
    frame = torch.zeros(n, dtype=torch.long, device=vec_env.device)  # frames into each env's episode
    ended = torch.zeros(n, dtype=torch.bool, device=vec_env.device)
    actions = torch.zeros(n, nenv.action_dim, device=vec_env.device)
    try:
        with tqdm(total=num_trajectories * T, unit="transition", disable=not progress,
                  desc=f"{cfg.env.robot} {cfg.env.task} policy in the ground truth") as bar:
            while kept < num_trajectories:
                for t in range(T):
                    record_frame_inputs(env, buffers, t, gravity, None if t == 0 else buffers["next_states"][t - 1])
                    states = buffers["states"][t]
                    depths = env.get_contacts()["contact_depths"] if task.needs_contact_depths else None
                    if t % control_steps == 0:
                        # Envs restart at trajectory boundaries only, so every env acts on the same frames.
                        actions = policy(task.observations(states, vec_env.last_actions)).clamp(-1.0, 1.0)
                        vec_env.last_actions = actions
                    torques = torch.nan_to_num(nenv.compute_torques(actions), 0.0, 0.0, 0.0)
                    nenv.step_with_joint_act(torques, check_finite=False)  # diverged ones are dropped
                    if "actions" in buffers:
                        buffers["actions"][t] = actions
                    buffers["joint_acts"][t] = torques
                    buffers["next_states"][t] = nenv.get_states()
                    frame += 1
                    if (t + 1) % control_steps == 0:
                        ended |= task.terminations(buffers["next_states"][t], depths)
                    bar.update(n)
                simulated += n * T
                batch = {name: buf.transpose(0, 1).cpu().numpy() for name, buf in buffers.items()}
                finite = finite_trajectories(batch)
                dropped += int((~finite).sum())
                keep = finite.nonzero()[0][: num_trajectories - kept]
                if len(keep) == 0:
                    raise RolloutDivergedError(f"{cfg.env.robot}: every ground-truth trajectory of the policy "
                                               "diverged")
                writer.append({name: values[keep] for name, values in batch.items()})
                kept += len(keep)
                # New episodes for the envs that fell, timed out or diverged.
                restart = ended | (frame >= frames_per_episode) | ~torch.as_tensor(finite, device=vec_env.device)
                ids = restart.nonzero().flatten()
                if len(ids):
                    vec_env.reset_envs(ids)
                    frame[ids] = 0
                    ended[ids] = False
                    episodes += len(ids)
                    if policy.recurrent:
                        policy.reset()  # (a recurrent policy's states are per batch; all restart together)
        seconds = time.perf_counter() - started
        out = writer.close({"num_dropped_trajectories": dropped, "generation_seconds": seconds,
                            "simulated_transitions": simulated})
    except BaseException:
        writer.abort()
        raise
    return PolicyDataSummary(str(out), kept, kept * T, simulated, dropped, episodes, seconds)

