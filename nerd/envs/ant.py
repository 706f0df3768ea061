"""Ant: the classic MuJoCo ant (free torso + 4 legs of 2 hinges) as the NeRD release built it.

The release's MJCF importer applied the file's default geom density (5 kg/m^3) only to the torso sphere and
kept density 1000 for every capsule, so its ant weighs 117.05 kg; its data, models and rewards all come from
this ant (a lighter parse with the same contact stiffness goes unstable). The bodies are therefore built
here from primitives with explicit densities rather than imported (Newton's MJCF importer gives the same
file a 0.91 kg ant):

* torso 31.654 kg: sphere r 0.25 (density 5) + four hip capsules (r 0.08, half-length 0.1414, density 1000);
* four upper legs, 7.832 kg each: capsule r 0.08, half-length 0.1414;
* four lower legs, 13.518 kg each: capsule r 0.08, half-length 0.2828.

Inertias are those of these shapes at these densities (Newton integrates them). Legs lie in the torso's
local xy plane along the diagonals; hips turn about z (+-0.698 rad), ankles about the horizontal axis
perpendicular to the leg. Contact friction is Newton's Coulomb law (``contact_friction``, see
:data:`nerd.modes.CONTACT_FRICTION`: the release's policies score the paper's rewards with it, not with
warp.sim's Huber-smoothed law).

Distributions: data generation starts from :meth:`Ant.sample_initial_states`; the task reset (RL
episodes, passive evaluation with ``--initial-states task``) is the release's, :meth:`Ant.sample_reset_states`,
restated Z-up. The release's world is Y-up with the torso's body frame (the MJCF's, Z-up) turned by
q_c = rot(x, -pi/2); ours is Z-up with the same body frame unturned, so a body-frame quantity carries over
unchanged and a world vector (X, Y, Z) of the release is (X, -Z, Y) here. From the default
pose (torso 1.0 m up, upright, hinges ``DEFAULT_HINGES``):

* torso position + (U(+-0.2), U(+-0.2), U(+-0.1)) m (the release's (0.2, 0.1, 0.2) in Y-up axes);
* orientation q ⊗ rot(axis, angle), axis = normalise(U(+-1)³), angle = U(+-1)·pi/6 (a body-frame tilt);
* hinges + U(+-0.2) rad each, not clamped to their limits;
* angular velocity R·0.25·U(+-1)³ and COM velocity R·0.1·U(+-1)³ (body-frame draws, world axes; the release
  writes the latter into its free joint's twist as v_o = p × ω + R·0.1·U, whose COM velocity is R·0.1·U);
* hinge rates 0.25·U(+-1) for hinges 2..8; the release's loop skips the first hinge, whose rate stays 0.
"""

from __future__ import annotations

import math

import newton
import numpy as np
import torch
import warp as wp

from nerd.envs.environment import Environment, uniform
from nerd.frames import quat_from_axis_angle, quat_mul, quat_rotate

TORSO_RADIUS = 0.25  # [m]
TORSO_DENSITY = 5.0  # [kg/m^3]
LEG_RADIUS = 0.08  # [m]
LEG_DENSITY = 1000.0  # [kg/m^3]
HIP_REACH = 0.2  # [m] x and y extent of the hip and upper-leg capsules
ANKLE_REACH = 0.4  # [m] x and y extent of the lower-leg capsules
HIP_LIMIT = 0.698  # [rad]
ANKLE_LIMITS = (0.524, 1.745)  # [rad]
ARMATURE = 0.05
JOINT_LIMIT_KE, JOINT_LIMIT_KD = 1.0e3, 1.0e2
# Contact material of the release's ant shapes, and of its ground plane: the release never sets the ground's
# material, so it keeps warp.sim's defaults. A contact averages the two shapes' materials (warp.sim's rule);
# our ground is not a shape, so the ant's shapes carry the averages (ke 7e4, kd 550, kf 2e3, mu 0.625).
CONTACT_KE, CONTACT_KD, CONTACT_KF, CONTACT_MU = 4.0e4, 1.0e2, 3.0e3, 0.75
GROUND_KE, GROUND_KD, GROUND_KF, GROUND_MU = 1.0e5, 1.0e3, 1.0e3, 0.5
ACTION_SCALE = 400.0  # [N·m] per unit action
START_HEIGHT = 1.0  # [m] torso height of the default state (the release's)
DEFAULT_HINGES = (0.0, 1.0, 0.0, -1.0, 0.0, -1.0, 0.0, 1.0)  # [rad] the release's: hips 0, ankles +-1
# Legs in MuJoCo order: (name, direction in the torso's xy plane, ankle axis, sign of the ankle range).
LEGS = (
    ("front_left", (1.0, 1.0), (-1.0, 1.0, 0.0), 1.0),
    ("front_right", (-1.0, 1.0), (1.0, 1.0, 0.0), -1.0),
    ("back_left", (-1.0, -1.0), (-1.0, 1.0, 0.0), -1.0),
    ("back_right", (1.0, -1.0), (1.0, 1.0, 0.0), 1.0),
)
# Data generation (the release's ranges).
INIT_HEIGHT_RANGE = (1.0, 1.3)  # [m]
INIT_HORIZONTAL_RANGE = 10.0  # [m] torso x and y uniform in +-this (the release's)
INIT_TILT_RANGE = math.pi / 2  # [rad] body-frame tilt about a random axis, angle uniform in +-this (the release's)
INIT_HIP_RANGE = math.radians(40.0)
INIT_ANG_VEL_RANGE = math.pi  # [rad/s] body-frame angular velocity
INIT_LIN_VEL_RANGE = 1.0  # [m/s] body-frame linear velocity
INIT_JOINT_VEL_RANGE = 2.0 * math.pi  # [rad/s]
TORQUE_NOISE_SCALE = 400.0  # [N·m]
# Task reset (the release's, Z-up).
RESET_POSITION_RANGE = (0.2, 0.2, 0.1)  # [m] x, y, z
RESET_TILT_RANGE = math.pi / 6  # [rad]
RESET_HINGE_RANGE = 0.2  # [rad]
RESET_ANG_VEL_RANGE = 0.25  # [rad/s], torso axes
RESET_LIN_VEL_RANGE = 0.1  # [m/s], torso axes
RESET_HINGE_VEL_RANGE = 0.25  # [rad/s]
HINGES = 8


def ankle_range(ankle_sign: float) -> tuple[float, float]:
    """Ankle limits [rad] of a leg whose ankle range has sign ``ankle_sign`` (see ``LEGS``)."""
    return ANKLE_LIMITS if ankle_sign > 0 else (-ANKLE_LIMITS[1], -ANKLE_LIMITS[0])


def hinge_limits() -> tuple[torch.Tensor, torch.Tensor]:
    """Lower and upper limits (8,) [rad] of the hinges in joint order (hip, ankle per leg)."""
    lower, upper = [], []
    for *_, ankle_sign in LEGS:
        low, high = ankle_range(ankle_sign)
        lower += [-HIP_LIMIT, low]
        upper += [HIP_LIMIT, high]
    return torch.tensor(lower), torch.tensor(upper)


def _capsule_along(direction: np.ndarray, length: float) -> tuple[wp.transform, float]:
    """Transform and half-height of a capsule from the body origin to ``direction * length``."""
    unit = direction / np.linalg.norm(direction)
    # Rotate the capsule's local z onto ``unit`` (a horizontal direction): about the perpendicular axis by 90 deg.
    axis = np.cross([0.0, 0.0, 1.0], unit)
    rot = wp.quat_from_axis_angle(wp.vec3(*axis), math.pi / 2)
    centre = 0.5 * length * unit
    return wp.transform(tuple(centre), rot), 0.5 * length


class Ant(Environment):
    """MuJoCo ant, 15/14 DoF (free base + 8 hinges), 25 contact candidates, 117.05 kg."""

    name = "Ant"
    random_torque_box = (TORQUE_NOISE_SCALE,) * 8
    """Hinge torques uniform in ±400 N·m."""
    contact_friction = "coulomb"
    frame_dt = 1.0 / 60.0
    sim_substeps = 16
    states_frame = "body"
    anchor_body = 0
    passive_metrics = {
        "base_position_error": ("position", ()),
        "base_orientation_error": ("orientation", ()),
        "joint_position_error": ("abs", tuple(range(7, 15))),
    }

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add the torso (free joint) and the four two-hinge legs."""
        leg_cfg = newton.ModelBuilder.ShapeConfig(
            density=LEG_DENSITY, ke=(CONTACT_KE + GROUND_KE) / 2, kd=(CONTACT_KD + GROUND_KD) / 2,
            kf=(CONTACT_KF + GROUND_KF) / 2, mu=(CONTACT_MU + GROUND_MU) / 2,
        )
        torso_cfg = leg_cfg.copy()
        torso_cfg.density = TORSO_DENSITY
        torso = builder.add_link(xform=wp.transform((0.0, 0.0, START_HEIGHT), wp.quat_identity()), label="torso")
        builder.add_shape_sphere(torso, radius=TORSO_RADIUS, cfg=torso_cfg)
        joints = [builder.add_joint_free(torso, label="root")]
        for name, (dx, dy), ankle_axis, ankle_sign in LEGS:
            diag = np.array([dx, dy, 0.0])
            hip_len = HIP_REACH * math.sqrt(2.0)
            xform, half = _capsule_along(diag, hip_len)
            builder.add_shape_capsule(torso, xform=xform, radius=LEG_RADIUS, half_height=half, cfg=leg_cfg)
            upper = builder.add_link(label=f"{name}_upper")
            builder.add_shape_capsule(upper, xform=xform, radius=LEG_RADIUS, half_height=half, cfg=leg_cfg)
            joints.append(
                builder.add_joint_revolute(
                    torso, upper, parent_xform=wp.transform(tuple(HIP_REACH * diag), wp.quat_identity()),
                    axis=(0.0, 0.0, 1.0), limit_lower=-HIP_LIMIT, limit_upper=HIP_LIMIT,
                    limit_ke=JOINT_LIMIT_KE, limit_kd=JOINT_LIMIT_KD, armature=ARMATURE, label=f"{name}_hip",
                )
            )
            lower = builder.add_link(label=f"{name}_lower")
            xform, half = _capsule_along(diag, ANKLE_REACH * math.sqrt(2.0))
            builder.add_shape_capsule(lower, xform=xform, radius=LEG_RADIUS, half_height=half, cfg=leg_cfg)
            ankle_axis = np.asarray(ankle_axis) / np.linalg.norm(ankle_axis)
            low, high = ankle_range(ankle_sign)
            joints.append(
                builder.add_joint_revolute(
                    upper, lower, parent_xform=wp.transform(tuple(HIP_REACH * diag), wp.quat_identity()),
                    axis=tuple(ankle_axis), limit_lower=low, limit_upper=high,
                    limit_ke=JOINT_LIMIT_KE, limit_kd=JOINT_LIMIT_KD, armature=ARMATURE, label=f"{name}_ankle",
                )
            )
        builder.add_articulation(joints, label="ant")

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Hinge torques = clamp(a, -1, 1) * 400 N·m."""
        return actions.clamp(-1.0, 1.0) * ACTION_SCALE

    def default_states(self, n: int) -> torch.Tensor:
        """The release's default pose at rest: upright torso 1.0 m up, hinges ``DEFAULT_HINGES``, (n, 29)."""
        q = torch.zeros(n, self.dof_q)
        q[:, 2] = START_HEIGHT
        q[:, 6] = 1.0
        q[:, 7:] = torch.tensor(DEFAULT_HINGES)
        return torch.cat([q, torch.zeros(n, self.dof_qd)], dim=1).to(self.torch_device)

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release's data sampler: torso anywhere within +-10 m, 1.0-1.3 m high, tilted by U(+-pi/2)
        about a random body axis; hips +-40 deg, ankles within range, body-frame velocities."""
        height = uniform(INIT_HEIGHT_RANGE[0], INIT_HEIGHT_RANGE[1], n, generator)
        horizontal = uniform([-INIT_HORIZONTAL_RANGE] * 2, [INIT_HORIZONTAL_RANGE] * 2, n, generator)
        axis = uniform([-1.0] * 3, [1.0] * 3, n, generator)
        angle = uniform(-INIT_TILT_RANGE, INIT_TILT_RANGE, n, generator).squeeze(1)
        quat = quat_from_axis_angle(axis, angle)
        joints = []
        for *_, ankle_sign in LEGS:
            hip = uniform(-INIT_HIP_RANGE, INIT_HIP_RANGE, n, generator)
            ankle = ankle_sign * uniform(ANKLE_LIMITS[0], ANKLE_LIMITS[1], n, generator)
            joints += [hip, ankle]
        position = torch.cat([horizontal, height], dim=1)
        # Velocities are drawn in the torso frame and rotated to the world (Newton's free-joint convention).
        lin = quat_rotate(quat, uniform([-INIT_LIN_VEL_RANGE] * 3, [INIT_LIN_VEL_RANGE] * 3, n, generator))
        ang = quat_rotate(quat, uniform([-INIT_ANG_VEL_RANGE] * 3, [INIT_ANG_VEL_RANGE] * 3, n, generator))
        joint_vel = uniform([-INIT_JOINT_VEL_RANGE] * 8, [INIT_JOINT_VEL_RANGE] * 8, n, generator)
        states = torch.cat([position, quat, *joints, lin, ang, joint_vel], dim=1)
        return states.to(self.torch_device)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release's task reset (module docstring), (n, 29), world frame."""
        states = self.default_states(n).cpu()
        q, qd = states[:, :15], states[:, 15:]  # views: writing them fills ``states``
        q[:, 0:3] += uniform([-r for r in RESET_POSITION_RANGE], RESET_POSITION_RANGE, n, generator)
        axis = uniform([-1.0] * 3, [1.0] * 3, n, generator)
        angle = uniform(-RESET_TILT_RANGE, RESET_TILT_RANGE, n, generator).squeeze(1)
        quat = quat_mul(q[:, 3:7], quat_from_axis_angle(axis, angle))
        q[:, 3:7] = quat
        q[:, 7:15] += uniform([-RESET_HINGE_RANGE] * HINGES, [RESET_HINGE_RANGE] * HINGES, n, generator)
        ang = quat_rotate(quat, uniform([-RESET_ANG_VEL_RANGE] * 3, [RESET_ANG_VEL_RANGE] * 3, n, generator))
        qd[:, 0:3] = quat_rotate(quat, uniform([-RESET_LIN_VEL_RANGE] * 3, [RESET_LIN_VEL_RANGE] * 3, n, generator))
        qd[:, 3:6] = ang
        qd[:, 7:] = uniform([-RESET_HINGE_VEL_RANGE] * (HINGES - 1), [RESET_HINGE_VEL_RANGE] * (HINGES - 1), n,
                            generator)
        return states.to(self.torch_device)
