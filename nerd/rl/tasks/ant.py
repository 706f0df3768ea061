"""Ant tasks: run, spin and spin-tracking, restated Z-up (the release defined them Y-up).

Notation, all from the world-frame state (Newton 1.8: ``joint_qd`` = [v, ω], v the torso's centre-of-mass
velocity): torso position p [m], orientation R (quaternion q, xyzw), COM velocity v [m/s] and angular
velocity ω [rad/s] in world axes; up vector u = R e_z, heading vector h = R e_x (the body's +x axis, which
points between the front-left and back-right legs); actions a ∈ [−1, 1]^8 (hinge torques 400·a N·m).
These are our definitions, modelled on the release's (its run: v_fwd + 0.1 u_up + h_fwd; spin: ω_up + u_up;
spin-tracking: 5 exp(−(ω_up − 5)² − 0.1 ω_x² − 0.1 ω_y²) + 0.1 u_up):

    run:            r = v_x + 0.1 u_z + h_x − 0.005 |a|²         (run along world +x, facing +x)
    spin:           r = ω_z + u_z − 0.005 |a|²                   (yaw rate about world z)
    spin-tracking:  r = 5 exp(−(ω_z − ω*)² − 0.1 (ω_x² + ω_y²)) + 0.1 u_z
                    with a target yaw rate ω* ~ U(−5, 5) rad/s drawn per episode and observed by the policy.

Spin-tracking scores the squared tracking error through a bounded exponential rather than as a negative
penalty: with negative per-step rewards and termination on falling, ending the episode early would pay.
Every task: an episode fails when the torso is lower than 0.3 m (p_z < 0.3) and times out after 500 steps.
Note the release's heavy ant (117 kg) cannot hold itself up passively: with zero torques the torso settles
at 0.298 m, so a policy has to learn to stand before it can run or spin.

Observation (37 numbers; 38 for spin-tracking), chosen by us:
``[p_z (1), u (3), h (3), Rᵀv (3), Rᵀω (3), hinge angles (8), hinge rates (8), last actions (8), (ω* (1))]``
-- up and heading vectors in world axes (together they fix R without the sign ambiguity of a quaternion),
velocities in the torso's axes.

Episodes start from the robot's task reset, :meth:`nerd.envs.ant.Ant.sample_reset_states` (near the default
pose), the same distribution passive evaluation uses with ``--initial-states task``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nerd.envs.environment import uniform
from nerd.frames import quat_rotate, quat_rotate_inv
from nerd.rl.tasks.base import Task

EPISODE_LENGTH = 500
TERMINATION_HEIGHT = 0.3  # [m]
ACTION_COST = 0.005  # per unit of |a|²
RUN_UP_WEIGHT, RUN_HEADING_WEIGHT = 0.1, 1.0
SPIN_UP_WEIGHT = 1.0
TRACK_SCALE, TRACK_TILT_WEIGHT, TRACK_UP_WEIGHT = 5.0, 0.1, 0.1
TARGET_YAW_RATE_RANGE = (-5.0, 5.0)  # [rad/s]

E_X, E_Z = (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)


def torso_frame(states: torch.Tensor) -> dict[str, torch.Tensor]:
    """Torso quantities of world-frame Ant states (N, 29).

    Returns:
        ``height`` (N,) [m]; ``quat`` (N, 4) xyzw; ``up`` u = R e_z and ``heading`` h = R e_x (N, 3), world;
        ``lin_vel`` v and ``ang_vel`` ω (N, 3) world [m/s, rad/s]; ``hinge_q`` and ``hinge_qd`` (N, 8).
    """
    quat = states[:, 3:7]
    return {
        "height": states[:, 2],
        "quat": quat,
        "up": quat_rotate(quat, states.new_tensor(E_Z).expand(len(states), 3)),
        "heading": quat_rotate(quat, states.new_tensor(E_X).expand(len(states), 3)),
        "lin_vel": states[:, 15:18],
        "ang_vel": states[:, 18:21],
        "hinge_q": states[:, 7:15],
        "hinge_qd": states[:, 21:29],
    }


class AntTask(Task):
    """Shared observation and termination of the Ant tasks (episodes start from the Ant's task reset)."""

    robot = "Ant"
    episode_length = EPISODE_LENGTH
    observation_dim = 37

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """``[p_z, u, h, Rᵀv, Rᵀω, hinge q, hinge qd, last actions]`` (N, 37)."""
        t = torso_frame(states)
        return torch.cat([
            t["height"].unsqueeze(1), t["up"], t["heading"],
            quat_rotate_inv(t["quat"], t["lin_vel"]), quat_rotate_inv(t["quat"], t["ang_vel"]),
            t["hinge_q"], t["hinge_qd"], last_actions,
        ], dim=1)

    def terminations(self, states: torch.Tensor) -> torch.Tensor:
        """Torso below 0.3 m, (N,) bool."""
        return states[:, 2] < TERMINATION_HEIGHT


def action_cost(actions: torch.Tensor) -> torch.Tensor:
    """0.005 |a|² (N,), on actions clamped to [−1, 1] as the controller applies them."""
    return ACTION_COST * (actions.clamp(-1.0, 1.0) ** 2).sum(dim=1)


class AntRun(AntTask):
    """Run along world +x while staying upright and facing +x."""

    name = "run"

    def rewards(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """v_x + 0.1 u_z + h_x − 0.005 |a|², (N,)."""
        t = torso_frame(states)
        return (t["lin_vel"][:, 0] + RUN_UP_WEIGHT * t["up"][:, 2] + RUN_HEADING_WEIGHT * t["heading"][:, 0]
                - action_cost(actions))


class AntSpin(AntTask):
    """Spin counter-clockwise about world z (positive yaw rate) while staying upright."""

    name = "spin"

    def rewards(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """ω_z + u_z − 0.005 |a|², (N,)."""
        t = torso_frame(states)
        return t["ang_vel"][:, 2] + SPIN_UP_WEIGHT * t["up"][:, 2] - action_cost(actions)


class AntSpinTracking(AntTask):
    """Spin at a per-episode target yaw rate ω*, given in the observation's last entry."""

    name = "spin_tracking"
    observation_dim = 38

    def __init__(self, num_envs: int, device: str | torch.device = "cpu"):
        super().__init__(num_envs, device)
        self.target_yaw_rate = torch.zeros(num_envs, device=self.device)
        """(N,) target yaw rate ω* of each env's current episode [rad/s]."""

    def reset(self, env_ids: Sequence[int] | torch.Tensor, generator: torch.Generator) -> None:
        """Draw ω* ~ U(−5, 5) rad/s for ``env_ids``."""
        ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
        low, high = TARGET_YAW_RATE_RANGE
        self.target_yaw_rate[ids] = uniform(low, high, len(ids), generator).squeeze(1).to(self.device)

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """The Ant observation plus ω*, (N, 38)."""
        return torch.cat([super().observations(states, last_actions), self.target_yaw_rate.unsqueeze(1)], dim=1)

    def rewards(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """5 exp(−(ω_z − ω*)² − 0.1 (ω_x² + ω_y²)) + 0.1 u_z, (N,)."""
        t = torso_frame(states)
        w = t["ang_vel"]
        error = (w[:, 2] - self.target_yaw_rate) ** 2 + TRACK_TILT_WEIGHT * (w[:, 0] ** 2 + w[:, 1] ** 2)
        return TRACK_SCALE * torch.exp(-error) + TRACK_UP_WEIGHT * t["up"][:, 2]
