"""The interface every simulator of N robot copies offers: :class:`RobotEnv`.

Both the analytical :class:`~nerd.envs.environment.Environment` and the
:class:`~nerd.neural_environment.NeuralEnvironment` implement it, so tasks, evaluation, data generation and the RL
vec env are written against this one declared surface (as rsl_rl's ``VecEnv``) instead of attributes forwarded
through wrappers. Shapes: N envs, S = dof_q + dof_qd, J = act_dim torques, A = action_dim, C contact candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class RobotEnv(Protocol):
    """N parallel copies of one robot, stepped one frame at a time."""

    name: str
    """Robot name, one of :data:`nerd.envs.ENV_NAMES`."""
    num_envs: int
    """Number of parallel copies N."""
    torch_device: torch.device
    """Device of every tensor exchanged."""
    frame_dt: float
    """Duration of one frame [s]."""
    control_steps: int
    """Frames per policy action in RL tasks (the robot's control mode's; 1 for most robots)."""

    @property
    def state_dim(self) -> int:
        """S = dof_q + dof_qd."""
        ...

    @property
    def action_dim(self) -> int:
        """Width A of the policy actions taken by :meth:`step`."""
        ...

    @property
    def contact_count(self) -> int:
        """Contact candidates C per env."""
        ...

    def step(self, actions: torch.Tensor) -> None:
        """Advance one frame with actions (N, A) through the robot's controller."""
        ...

    def step_with_joint_act(self, joint_acts: torch.Tensor) -> None:
        """Advance one frame with joint torques (N, J)."""
        ...

    def reset(self, env_ids: Sequence[int] | torch.Tensor | None = None, states: torch.Tensor | None = None,
              generator: torch.Generator | None = None) -> None:
        """Reset ``env_ids`` (all if None) to ``states`` (world frame) or the robot's task reset."""
        ...

    def set_states(self, states: torch.Tensor, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Overwrite the states (n, S) of ``env_ids`` (all if None), world frame."""
        ...

    def get_states(self) -> torch.Tensor:
        """Copy of the current states (N, S), world frame."""
        ...

    def get_root_body_q(self) -> torch.Tensor:
        """Pose [p, quat xyzw] (N, 7) of each env's anchor body, world frame."""
        ...

    def get_body_q(self) -> torch.Tensor:
        """Poses [p, quat xyzw] (N, bodies_per_env, 7) of all bodies, world frame."""
        ...

    def get_contacts(self) -> dict[str, torch.Tensor]:
        """Contact features of the current state (N, C, ·), world frame."""
        ...

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """The robot's controller: actions (N, A) -> joint torques (N, J)."""
        ...

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The robot's task reset: (n, S) states, world frame."""
        ...
