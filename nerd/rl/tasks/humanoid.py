"""Humanoid run: the Isaac Gym humanoid locomotion task, on this project's world-frame states.

Source: IsaacGymEnvs' ``Humanoid`` task (``compute_humanoid_reward``, ``cfg/task/Humanoid.yaml``), the benchmark
this body (:mod:`nerd.envs.humanoid`) comes from.

Notation (world frame, Z-up): torso height z, up vector u = R e_z, heading h = R e_x, torso COM velocity v [m/s];
hinge angles θ_i, rates θ̇_i [rad/s], limits [l_i, u_i], motor gears g_i (g_max = 135 N·m), actions a_i in [−1, 1];
s_i = (2θ_i − l_i − u_i) / (u_i − l_i), the angle scaled to [−1, 1] by its limits. Per step, on the state after it:

    r = v_x + 2 + 0.1·[u_z > 0.93] + 0.5·min(1, h_x / 0.8)
        − 0.01 Σ a_i² − 0.05 Σ |a_i · 0.1 θ̇_i| g_i / g_max − 0.25 Σ_{|s_i| > 0.98} (|s_i| − 0.98) / 0.02 · g_i / g_max

and r = −1 instead when z < 0.8 m, which ends the episode; episodes time out after 1000 steps (16.7 s). The terms:
progress, alive bonus (2), upright (0.1 once u_z > 0.93), heading (0.5, in full once it points within 37° of +x),
action cost (0.01), energy cost (0.05), joints at their limits (0.25), death (−1 below the termination height 0.8 m),
IsaacGymEnvs' weights and thresholds. One change, the progress term: IsaacGymEnvs rewards the potential
difference −(|p_xy − t| − |p'_xy − t|)/Δt toward a target t 1000 m ahead along +x, from the torso positions one step
apart. A task here is a function of the state after the step, so progress is the torso's COM velocity along +x,
the potential difference's limit for a short step (the direction to the target is +x to within |p_y| / 1000 rad).
Heading: IsaacGymEnvs' h · d with d the horizontal unit direction to that target, here e_x.

Observation (74 numbers): ``[z, v and 0.25 ω in torso axes (3 + 3), yaw, roll, u_z, h_x, s (21), 0.1 θ̇ (21), the
last actions (21)]``, IsaacGymEnvs' observation without the angle to the target (−yaw to within 1e-3 rad here),
the measured joint forces and the feet's force sensors, which are not part of the state. Episodes start from the
robot's task reset, :meth:`nerd.envs.humanoid.Humanoid.sample_reset_states` (IsaacGymEnvs').
"""

from __future__ import annotations

import torch

from nerd.device_constants import device_constant
from nerd.envs.humanoid import GEARS, HINGE_LOWER, HINGE_UPPER
from nerd.frames import quat_rotate_inv, quat_to_euler_xyz
from nerd.rl.tasks.base import Task, floating_base_frame

EPISODE_LENGTH = 1000
TERMINATION_HEIGHT = 0.8  # [m]
ALIVE_BONUS = 2.0
UP_WEIGHT, UP_THRESHOLD = 0.1, 0.93
HEADING_WEIGHT, HEADING_FULL = 0.5, 0.8
ACTION_COST, ENERGY_COST, LIMIT_COST = 0.01, 0.05, 0.25
LIMIT_MARGIN = 0.98  # |s| beyond which a hinge counts as at its limit
DEATH_COST = -1.0
HINGE_RATE_SCALE, ANG_VEL_SCALE = 0.1, 0.25
EFFORT_RATIO = tuple(gear / max(GEARS) for gear in GEARS)


def scaled_hinges(joint_q: torch.Tensor) -> torch.Tensor:
    """Hinge angles (N, 21) scaled to [−1, 1] by their limits (s in the module docstring)."""
    lower, upper = device_constant(HINGE_LOWER, joint_q), device_constant(HINGE_UPPER, joint_q)
    return (2.0 * joint_q - lower - upper) / (upper - lower)


class HumanoidRun(Task):
    """Run along world +x, upright and facing +x, at a small action and energy cost."""

    robot = "Humanoid"
    name = "run"
    episode_length = EPISODE_LENGTH
    observation_dim = 74

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """See the module docstring, (N, 74)."""
        t = floating_base_frame(states, 28)
        roll, _, yaw = quat_to_euler_xyz(t["quat"]).unbind(dim=-1)
        return torch.cat([
            t["height"][:, None], quat_rotate_inv(t["quat"], t["lin_vel"]),
            ANG_VEL_SCALE * quat_rotate_inv(t["quat"], t["ang_vel"]), yaw[:, None], roll[:, None],
            t["up"][:, 2:3], t["heading"][:, 0:1], scaled_hinges(t["joint_q"]), HINGE_RATE_SCALE * t["joint_qd"],
            last_actions,
        ], dim=1)

    def terminations(self, states: torch.Tensor, contact_depths: torch.Tensor | None = None) -> torch.Tensor:
        """Torso below 0.8 m, (N,) bool."""
        return states[:, 2] < TERMINATION_HEIGHT

    def reward_terms(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                     ) -> dict[str, torch.Tensor]:
        """The terms of the module docstring; in a fallen state all are 0 but ``death`` (−1)."""
        t = floating_base_frame(states, 28)
        effort = device_constant(EFFORT_RATIO, states)
        zero = torch.zeros((), device=states.device)
        beyond = scaled_hinges(t["joint_q"]).abs() - LIMIT_MARGIN
        terms = {
            "progress": t["lin_vel"][:, 0],
            "alive": torch.full_like(t["height"], ALIVE_BONUS),
            "up": torch.where(t["up"][:, 2] > UP_THRESHOLD, UP_WEIGHT, zero),
            "heading": HEADING_WEIGHT * (t["heading"][:, 0] / HEADING_FULL).clamp(max=1.0),
            "actions": -ACTION_COST * actions.square().sum(dim=1),
            "energy": -ENERGY_COST * (actions * HINGE_RATE_SCALE * t["joint_qd"]).abs().mul(effort).sum(dim=1),
            "joint_limits": -LIMIT_COST * (torch.where(beyond > 0, beyond, zero) / (1.0 - LIMIT_MARGIN)).mul(
                effort).sum(dim=1),
        }
        dead = t["height"] < TERMINATION_HEIGHT
        terms = {name: torch.where(dead, zero, value) for name, value in terms.items()}
        terms["death"] = torch.where(dead, DEATH_COST, zero)
        return terms
