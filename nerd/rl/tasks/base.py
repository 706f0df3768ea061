"""The contract every RL task implements: observations, rewards, terminations and per-episode parameters.

Episodes start from the robot's task reset, ``sample_reset_states`` of its env module (:mod:`nerd.envs`): a
robot's distributions live in one layer, shared by every task on it and by passive evaluation.

A task is pure tensor maths on world-frame states ``[joint_q, joint_qd]`` (this project's conventions: Z-up, quaternions
xyzw, a free joint's ``joint_qd = [v (COM, world), ω (world)]``), so the same code scores ground-truth and neural
rollouts, and tests can check it on hand-built states without a simulator. Per-episode parameters (a target yaw
rate, say) live in the task object, one row per env, and are redrawn by :meth:`Task.reset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from nerd.device_constants import device_constant
from nerd.frames import quat_rotate

E_X, E_Z = (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)


def floating_base_frame(states: torch.Tensor, dof_q: int) -> dict[str, torch.Tensor]:
    """Base quantities of world-frame states (N, dof_q + dof_qd) of a robot on a free joint
    (``joint_q = [p, quat, hinges]``, ``joint_qd = [v, ω, hinge rates]``, so dof_qd = dof_q − 1).

    Returns:
        ``height`` (N,) [m]; ``quat`` (N, 4) xyzw; ``up`` R e_z and ``heading`` R e_x (N, 3), world;
        ``lin_vel`` the COM velocity v and ``ang_vel`` ω (N, 3), world [m/s, rad/s]; ``joint_q`` and
        ``joint_qd`` (N, dof_q - 7) of the other joints.
    """
    n, quat = len(states), states[:, 3:7]
    return {
        "height": states[:, 2],
        "quat": quat,
        "up": quat_rotate(quat, device_constant(E_Z, states).expand(n, 3)),
        "heading": quat_rotate(quat, device_constant(E_X, states).expand(n, 3)),
        "lin_vel": states[:, dof_q : dof_q + 3],
        "ang_vel": states[:, dof_q + 3 : dof_q + 6],
        "joint_q": states[:, 7:dof_q],
        "joint_qd": states[:, dof_q + 6 :],
    }


class Task:
    """One RL task on one robot, for N parallel envs.

    Args:
        num_envs: Number of parallel envs N.
        device: Torch device of the states the task is given.
    """

    robot: ClassVar[str] = ""
    """Name of the robot (``nerd.envs.ENV_NAMES``) the task drives."""
    name: ClassVar[str] = ""
    """Task name, unique per robot."""
    episode_length: ClassVar[int] = 1
    """Steps (frames) before an episode times out."""
    observation_dim: ClassVar[int] = 0
    """Width of one env's observation."""
    needs_contact_depths: ClassVar[bool] = False
    """The vec env passes :meth:`terminations` the contact depths of the frame's start (a fixed-contact robot's
    stale depths, as the release's ANYmal termination reads them); off, it passes None and skips reading them."""

    def __init__(self, num_envs: int, device: str | torch.device = "cpu"):
        self.num_envs = num_envs
        self.device = torch.device(device)

    def reset(self, env_ids: Sequence[int] | torch.Tensor, generator: torch.Generator) -> None:
        """Draw the per-episode parameters of ``env_ids`` (nothing for tasks without any)."""

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """Observations (N, observation_dim) from states (N, S) and the actions (N, A) that led to them."""
        raise NotImplementedError

    def rewards(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Reward (N,) of the step that took actions (N, A), applied torques ``joint_acts`` (N, J) (given by the vec
        env; tasks with a torque cost need them) and arrived in states (N, S): the sum of :meth:`reward_terms`.

        A task defines its terms, or this method alone (then its reward is the one term ``reward``).
        """
        return torch.stack(list(self.reward_terms(states, actions, joint_acts).values())).sum(dim=0)

    def reward_terms(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                     ) -> dict[str, torch.Tensor]:
        """The reward's weighted terms, (N,) each, summing to :meth:`rewards` (for diagnostics)."""
        if type(self).rewards is Task.rewards:
            raise NotImplementedError(f"{type(self).__name__} defines neither its reward nor its reward terms")
        return {"reward": self.rewards(states, actions, joint_acts)}

    def terminations(self, states: torch.Tensor, contact_depths: torch.Tensor | None = None) -> torch.Tensor:
        """(N,) bool: the episode fails in these states (time-outs are the vec env's business).

        ``contact_depths`` (N, C): the candidates' heights above the ground at the start of the step, given when
        :attr:`needs_contact_depths` is set.
        """
        raise NotImplementedError
