"""Franka reach (the release's ``FrankaReach`` task): bring the end effector to a random target.

Every episode draws a target, world frame (robot base at the origin, Z-up), uniformly in
x ∈ [0.3, 0.7], y ∈ [−0.35, 0.35], z ∈ [0.05, 0.45] m. With the end effector ee = link 7 · (0, 0, 0.21207)
(forward kinematics, :func:`nerd.envs.franka.end_effector_position`) and d = |ee − target| [m], per RL step,
on the state reached by the step:

    cost   = d − [1 / (e^{50 d} + 1e-4 + e^{−50 d}) + 1 / (e^{300 d} + 1e-4 + e^{−300 d})]
    reward = −cost                      (≈ +0.99995 at d = 0; reward scale 1, bias 0)

Observation (13): ``[wrap(q) (7), ee (3), target (3)]``, no joint velocities. The release fed q as simulated;
we wrap it into [−π, π) because the neural simulator wraps continuous joints and the ground truth does not, so
the two simulators give the policy the same numbers (equal to the release's wherever |q| < π, which the
default pose ± 0.125 rad is far inside). Episodes last 128 RL steps and never end early; one RL step is
``control_steps`` frames of the robot's control mode (torque 1, joint-position PD 2, see
:mod:`nerd.envs.franka`). Episodes start from the robot's task reset: the default pose ± 0.125 rad per joint,
at rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nerd.envs.environment import uniform
from nerd.envs.franka import JOINTS, end_effector_position
from nerd.frames import wrap_angle
from nerd.rl.tasks.base import Task

EPISODE_LENGTH = 128
TARGET_LOW = (0.3, -0.35, 0.05)  # [m]
TARGET_HIGH = (0.7, 0.35, 0.45)  # [m]
INITIAL_TARGET = (0.0, 0.0, 0.5)  # [m] the release's placeholder before the first reset
BONUS_SHARPNESS = (50.0, 300.0)  # [1/m] of the two bell-shaped bonuses
BONUS_EPS = 1.0e-4


def reach_cost(distance: torch.Tensor) -> torch.Tensor:
    """The release's reach cost of end-effector distances ``d`` [m] (module docstring), same shape."""
    bonus = sum(1.0 / (torch.exp(k * distance) + BONUS_EPS + torch.exp(-k * distance)) for k in BONUS_SHARPNESS)
    return distance - bonus


class FrankaReach(Task):
    """Reach a random end-effector target; the target is a per-episode parameter (``targets``, (N, 3))."""

    robot = "Franka"
    name = "reach"
    episode_length = EPISODE_LENGTH
    observation_dim = 2 * 3 + JOINTS

    def __init__(self, num_envs: int, device: str | torch.device = "cpu"):
        super().__init__(num_envs, device)
        self.targets = torch.tensor(INITIAL_TARGET, device=self.device).repeat(num_envs, 1)
        """(N, 3) end-effector target of each env's episode [m], world frame."""

    def reset(self, env_ids: Sequence[int] | torch.Tensor, generator: torch.Generator) -> None:
        """Draw new targets for ``env_ids``."""
        ids = torch.as_tensor(env_ids, device=self.device)
        self.targets[ids] = uniform(TARGET_LOW, TARGET_HIGH, len(ids), generator).to(self.device)

    def distances(self, states: torch.Tensor) -> torch.Tensor:
        """End-effector distance to the target (N,) [m]."""
        return (end_effector_position(states[:, :JOINTS]) - self.targets).norm(dim=-1)

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """``[wrap(q), ee, target]`` (N, 13)."""
        q = states[:, :JOINTS]
        return torch.cat([wrap_angle(q), end_effector_position(q), self.targets], dim=1)

    def rewards(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                ) -> torch.Tensor:
        """−cost(d), (N,); the reach reward has no torque or action cost."""
        return -reach_cost(self.distances(states))

    def terminations(self, states: torch.Tensor, contact_depths: torch.Tensor | None = None) -> torch.Tensor:
        """Never: the episode always runs to its time-out."""
        return torch.zeros(len(states), dtype=torch.bool, device=states.device)
