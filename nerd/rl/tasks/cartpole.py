"""Cartpole swing-up (the release's task, unchanged by the move to Z-up: it only uses joint coordinates).

State ``[x, θ, ẋ, θ̇]``: cart position [m], pole angle [rad] (0 = upright, unwrapped in the simulator), their
rates. With ``wrap(θ)`` into [−π, π):

    cost   = wrap(θ)² + 0.05 x² + 0.1 θ̇² + 0.1 ẋ²
    reward = 5 − cost                                  (per step, on the state reached by the step)
    fail   = |x| > 4  or  |θ̇| > 10  or  |ẋ| > 10
    time-out after 300 steps (5 s at 60 Hz)

Observation ``[x, wrap(θ), ẋ, θ̇]``; one action in [−1, 1], the cart force clamp(a)·1500 N applied by the
robot's controller. Episodes start from the robot's task reset: x, ẋ, θ̇ ~ U(−1, 1), θ ~ U(−π, π).
"""

from __future__ import annotations

import torch

from nerd.frames import wrap_angle
from nerd.rl.tasks.base import Task

EPISODE_LENGTH = 300
REWARD_BIAS = 5.0
# Cost weights of x², θ̇², ẋ² (wrap(θ)² has weight 1).
X_WEIGHT, THETA_DOT_WEIGHT, X_DOT_WEIGHT = 0.05, 0.1, 0.1
X_LIMIT = 4.0  # [m]
THETA_DOT_LIMIT = 10.0  # [rad/s]
X_DOT_LIMIT = 10.0  # [m/s]


class CartpoleSwingUp(Task):
    """Swing the pole up from any angle and balance it over the cart near x = 0."""

    robot = "Cartpole"
    name = "swingup"
    episode_length = EPISODE_LENGTH
    observation_dim = 4

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """``[x, wrap(θ), ẋ, θ̇]`` (N, 4)."""
        return torch.stack([states[:, 0], wrap_angle(states[:, 1]), states[:, 2], states[:, 3]], dim=1)

    def rewards(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                ) -> torch.Tensor:
        """5 − (wrap(θ)² + 0.05 x² + 0.1 θ̇² + 0.1 ẋ²), (N,)."""
        x, theta, x_dot, theta_dot = states.unbind(dim=1)
        cost = (wrap_angle(theta) ** 2 + X_WEIGHT * x**2 + THETA_DOT_WEIGHT * theta_dot**2
                + X_DOT_WEIGHT * x_dot**2)
        return REWARD_BIAS - cost

    def terminations(self, states: torch.Tensor, contact_depths: torch.Tensor | None = None) -> torch.Tensor:
        """|x| > 4 m, |θ̇| > 10 rad/s or |ẋ| > 10 m/s, (N,) bool."""
        return ((states[:, 0].abs() > X_LIMIT) | (states[:, 3].abs() > THETA_DOT_LIMIT)
                | (states[:, 2].abs() > X_DOT_LIMIT))
