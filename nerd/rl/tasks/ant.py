"""Ant tasks of the NeRD release, restated Z-up: run, spin and spin_track.

These are the tasks the release's published policies were trained on,
so those policies can play here and the paper's Table 1 numbers can be compared with ours.

Notation, all from the world-frame state (Newton 1.8: ``joint_qd`` = [v, ω], v the torso's centre-of-mass
velocity; the torso's COM is its origin): torso position p [m], orientation R (quaternion q, xyzw), COM
velocity v [m/s] and angular velocity ω [rad/s] in world axes; up vector u = R e_z, heading vector h = R e_x
(the body's +x axis, between the front-left and back-right legs). Per step, on the state after the step, with
no action cost (reward scale 1, bias 0):

    run:         r = v_x + 0.1 u_z + h_x                          (release: lin_vel.x + 0.1 up.y + heading.x)
    spin:        r = ω_z + u_z                                    (release: ang_vel.y + up.y)
    spin_track:  r = 5 exp(−(ω_z − 5)² − 0.1 ω_x² − 0.1 ω_y²) + 0.1 u_z     (target yaw rate fixed: 5 rad/s)

The release's world is Y-up; a vector (x, y, z) here is (x, z, −y) there, so its up axis y is
our z and its x is our x: the formulas keep their meaning (spin: counter-clockwise seen from above).
Every task: an episode fails when the torso is lower than 0.3 m and times out after 500 steps. Episodes start
from the robot's task reset, :meth:`nerd.envs.ant.Ant.sample_reset_states` (the release's).

Observation (28 numbers, the release's ``dflex`` layout, rebuilt in its Y-up world axes):

    [h_x (1), q_Y (4), v_Y (3), ω_Y (3), hinge angles (8), hinge rates (8), u_z (1)]

with q_Y = q_c ⊗ q, q_c = rot(x, −π/2) the release's base rotation, and v_Y, ω_Y the velocities in Y-up axes.
Index 0 is meant to be the torso height, but the release's observation kernel writes 29 values into a
28-wide buffer: its last value, the heading's x component, overwrites index 0 (of the next env's row), and the
published policies were trained with that (their input statistics at index 0: mean 0.93, std 0.10 for run).
We feed each env its own h_x there.
"""

from __future__ import annotations

import torch

from nerd.device_constants import device_constant
from nerd.frames import Y_UP_BASE_ROTATION as RELEASE_BASE_ROTATION
from nerd.frames import quat_mul, to_y_up
from nerd.rl.tasks.base import Task, floating_base_frame

EPISODE_LENGTH = 500
TERMINATION_HEIGHT = 0.3  # [m]
RUN_UP_WEIGHT = 0.1
SPIN_TRACK_TARGET = 5.0  # [rad/s]
TRACK_SCALE, TRACK_TILT_WEIGHT, TRACK_UP_WEIGHT = 5.0, 0.1, 0.1


def torso_frame(states: torch.Tensor) -> dict[str, torch.Tensor]:
    """Torso quantities of world-frame Ant states (N, 29) (:func:`~nerd.rl.tasks.base.floating_base_frame`):
    ``height``, ``quat``, ``up``, ``heading``, ``lin_vel``, ``ang_vel``, and the 8 hinges' ``joint_q``, ``joint_qd``."""
    return floating_base_frame(states, 15)


class AntTask(Task):
    """Observation and termination shared by the Ant tasks (the release's)."""

    robot = "Ant"
    episode_length = EPISODE_LENGTH
    observation_dim = 28

    def observations(self, states: torch.Tensor, last_actions: torch.Tensor) -> torch.Tensor:
        """``[h_x, q_c ⊗ q, v_Y, ω_Y, hinge q, hinge qd, u_z]`` (N, 28), see the module docstring."""
        t = torso_frame(states)
        quat_y_up = quat_mul(device_constant(RELEASE_BASE_ROTATION, states).expand(len(states), 4), t["quat"])
        return torch.cat([
            t["heading"][:, 0:1], quat_y_up, to_y_up(t["lin_vel"]), to_y_up(t["ang_vel"]),
            t["joint_q"], t["joint_qd"], t["up"][:, 2:3],
        ], dim=1)

    def terminations(self, states: torch.Tensor, contact_depths: torch.Tensor | None = None) -> torch.Tensor:
        """Torso below 0.3 m, (N,) bool."""
        return states[:, 2] < TERMINATION_HEIGHT


class AntRun(AntTask):
    """Run along world +x while staying upright and facing +x."""

    name = "run"

    def reward_terms(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                     ) -> dict[str, torch.Tensor]:
        """v_x, 0.1 u_z and h_x."""
        t = torso_frame(states)
        return {"velocity": t["lin_vel"][:, 0], "up": RUN_UP_WEIGHT * t["up"][:, 2], "heading": t["heading"][:, 0]}


class AntSpin(AntTask):
    """Spin counter-clockwise about world z (positive yaw rate) while staying upright."""

    name = "spin"

    def reward_terms(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                     ) -> dict[str, torch.Tensor]:
        """ω_z and u_z."""
        t = torso_frame(states)
        return {"yaw_rate": t["ang_vel"][:, 2], "up": t["up"][:, 2]}


class AntSpinTrack(AntTask):
    """Spin at 5 rad/s about world z, level."""

    name = "spin_track"

    def reward_terms(self, states: torch.Tensor, actions: torch.Tensor, joint_acts: torch.Tensor | None = None
                     ) -> dict[str, torch.Tensor]:
        """5 exp(−(ω_z − 5)² − 0.1 ω_x² − 0.1 ω_y²) and 0.1 u_z."""
        t = torso_frame(states)
        w = t["ang_vel"]
        error = (w[:, 2] - SPIN_TRACK_TARGET) ** 2 + TRACK_TILT_WEIGHT * (w[:, 0] ** 2 + w[:, 1] ** 2)
        return {"tracking": TRACK_SCALE * torch.exp(-error), "up": TRACK_UP_WEIGHT * t["up"][:, 2]}
