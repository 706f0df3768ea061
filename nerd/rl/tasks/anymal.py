"""ANYmal tasks of the NeRD release, restated Z-up: forward_walk and side_walk.

These are the tasks of the release's published ANYmal policies (``anymal_forward.yaml``, ``anymal_side.yaml``),
on its position-controlled robot (:class:`nerd.envs.anymal.Anymal`, ``control_mode="position"``: targets
q_default + 0.5·a, Kp 85, Kd 2, torques held over the frame).

Notation, from the world-frame state (Newton 1.8: ``joint_qd`` = [v_com, ω]): base origin p [m], orientation R
(quaternion q, xyzw), world angular velocity ω [rad/s], and the base-origin velocity
v = v_com − ω × (R com_b) [m/s] (the release's ``v_o − p × ω``); τ the 12 torques the PD law applied in the step.
Per step, on the state after the step (reward scale 1, bias 0):

    r = max(0, exp(−e_lin) + 0.5 exp(−ω_z²) − 2.5e-5 Σ τ²)
    forward_walk: e_lin = (v_x − 1)² + v_y²
    side_walk:    e_lin = v_x² + (v_y + 1)²         (release: Y-up v_Z = +1, i.e. Z-up v_y = −1, the robot's right)

Termination (failure), on the contact depths of the frame's *start* (the release's depths are computed once per
frame before stepping, so its cost sees them one frame stale; depth = a candidate's centre height):
base-capsule ends (candidates 0, 1) below 0.11 m, any knee-capsule end (2, 3, 5, 6, 8, 9, 11, 12) below 0.07 m
(both: within 1 cm of the ground), or the base origin below 0.4 m. Episodes time out after 1000 steps (16.7 s) and
start from the robot's task reset, :meth:`nerd.envs.anymal.Anymal.sample_reset_states` (the release's).

Observation (37 numbers, the release's ``dflex`` layout in its Y-up world axes):

    [p_z (1), q_c ⊗ q (4), v_Y (3), ω_Y (3), joint q (12), joint q̇ (12), (R e_z)_z (1), (R e_x)_x (1)]

with q_c = rot(x, −π/2) and a_Y = (a_x, a_z, −a_y). Joints in state order RH, LH, RF, LF (the release's). The
last two entries are the Y-up up-vector's height and heading's x, the same numbers in either world.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from nerd.device_constants import device_constant
from nerd.envs.anymal import BASE_COM
from nerd.frames import Y_UP_BASE_ROTATION, quat_mul, quat_rotate, to_y_up
from nerd.rl.tasks.base import Task, floating_base_frame

EPISODE_LENGTH = 1000
TARGET_SPEED = 1.0  # [m/s]
YAW_WEIGHT = 0.5
TORQUE_WEIGHT = 2.5e-5  # per (N·m)²
BASE_CONTACTS, KNEE_CONTACTS = (0, 1), (2, 3, 5, 6, 8, 9, 11, 12)
BASE_CONTACT_MIN, KNEE_CONTACT_MIN = 0.11, 0.07  # [m] centre heights
BASE_HEIGHT_MIN = 0.4  # [m]


def base_frame(states: torch.Tensor) -> dict[str, torch.Tensor]:
    """Base quantities of world-frame ANYmal states (N, 37): those of
    :func:`~nerd.rl.tasks.base.floating_base_frame` (12 ``joint_q``, ``joint_qd``), except that ``lin_vel`` is the
    base origin's velocity v_com − ω × R com_b, which the release's rewards and observation use."""
    t = floating_base_frame(states, 19)
    com = quat_rotate(t["quat"], device_constant(BASE_COM, states).expand(len(states), 3))
    t["lin_vel"] = t["lin_vel"] - torch.cross(t["ang_vel"], com, dim=-1)
    return t


class AnymalTask(Task):
    """Observation, reward and termination shared by the ANYmal walking tasks; subclasses set the target."""

    robot = "Anymal"
    episode_length = EPISODE_LENGTH
    observation_dim = 37
    needs_contact_depths = True
    target_velocity: ClassVar[tuple[float, float]] = (0.0, 0.0)
    """Target base-origin velocity (v_x, v_y) [m/s], world (Z-up)."""

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """``[p_z, q_c ⊗ q, v_Y, ω_Y, joint q, joint q̇, (R e_z)_z, (R e_x)_x]`` (N, 37), module docstring."""
        t = base_frame(states)
        quat_y_up = quat_mul(device_constant(Y_UP_BASE_ROTATION, states).expand(len(states), 4), t["quat"])
        return torch.cat([
            t["height"][:, None], quat_y_up, to_y_up(t["lin_vel"]), to_y_up(t["ang_vel"]), t["joint_q"],
            t["joint_qd"], t["up"][:, 2:3], t["heading"][:, 0:1],
        ], dim=1)

    def reward_terms(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                     ) -> dict[str, torch.Tensor]:
        """``velocity`` exp(−e_lin), ``yaw`` 0.5 exp(−ω_z²), ``torque`` −2.5e-5 Σ τ², and ``floor`` (≥ 0) that lifts
        a negative sum to the release's 0: the terms sum to :meth:`rewards`."""
        if joint_acts is None:
            raise ValueError("the ANYmal walking reward needs the applied torques (joint_acts)")
        t = base_frame(states)
        vx, vy = self.target_velocity
        error = (t["lin_vel"][:, 0] - vx) ** 2 + (t["lin_vel"][:, 1] - vy) ** 2
        terms = {"velocity": torch.exp(-error), "yaw": YAW_WEIGHT * torch.exp(-t["ang_vel"][:, 2] ** 2),
                 "torque": -TORQUE_WEIGHT * (joint_acts**2).sum(dim=1)}
        terms["floor"] = (-sum(terms.values())).clamp(min=0.0)
        return terms

    def terminations(self, states: torch.Tensor, contact_depths: torch.Tensor | None = None) -> torch.Tensor:
        """Base capsule < 0.11 m, a knee < 0.07 m (start-of-frame depths), or base origin < 0.4 m; (N,) bool."""
        if contact_depths is None:
            raise ValueError("the ANYmal termination needs the start-of-frame contact depths")
        base_ids, knee_ids = (device_constant(i, contact_depths, torch.long) for i in (BASE_CONTACTS, KNEE_CONTACTS))
        base = (contact_depths[:, base_ids] < BASE_CONTACT_MIN).any(dim=1)
        knee = (contact_depths[:, knee_ids] < KNEE_CONTACT_MIN).any(dim=1)
        return base | knee | (states[:, 2] < BASE_HEIGHT_MIN)


class AnymalForwardWalk(AnymalTask):
    """Walk along world +x at 1 m/s without turning."""

    name = "forward_walk"
    target_velocity = (TARGET_SPEED, 0.0)


class AnymalSideWalk(AnymalTask):
    """Walk sideways toward world −y (the robot's right at the default heading) at 1 m/s without turning."""

    name = "side_walk"
    target_velocity = (0.0, -TARGET_SPEED)
