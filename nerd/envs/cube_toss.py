"""CubeToss: a passive cube tossed onto the ground, as the NeRD release built it.

One box body on a free joint, no actuator (joint torques of width 0), Z-up, gravity -9.81:

* half-extent 0.0524 m (side 0.1048 m), density 1000 kg/m^3, so **1.1510227 kg** and I = 0.00210695·E kg·m^2
  about its centre (Newton integrates the box; tests/nerd/envs/test_cube_toss.py checks both);
* 8 contact candidates, its corners in the release's ``get_box_vertex`` order (bit 0 = x, bit 1 = y, bit 2 = z;
  0 = -, 1 = +): see :data:`CORNER_SIGNS`;
* contact ke 1e4, kd 1e3, kf 50, mu 0.15 on both the cube and the release's ground plane, so these are the
  effective values; each of the two shapes had a contact thickness of 1e-5 m, so the gap is the corner height
  minus 2e-5 m. Our ground is not a shape: the cube carries the whole 2e-5 m as its margin;
* 20 substeps at frame_dt = 1/148 s; Featherstone's mass matrix refreshed at **every** substep, as the release
  did for this robot (``featherstone_update_mass_matrix_once_per_step=False``);
* friction: warp.sim's Huber-smoothed law (``contact_friction = "huber"``), the law the release's cube data was
  made with. Unlike the Ant (whose default is Newton's Coulomb law because the release's Ant policies only
  reproduce the paper's rewards with it, docs/rl.md), nothing in the release contradicts its own law for the
  cube. With kf 50 and mu 0.15 that law is almost viscous: a corner carrying ~2.8 N slides with friction
  kf·|vt| up to ~0.13 m/s, where Newton's Coulomb law would already cap at mu·|Fn| from 0.0085 m/s.
  ``--contact-friction coulomb`` selects Newton's law.

Reset and data sampler (the release's ``reset_cube``; the generator always starts from it), s = half-extent:

* position U(+-20 s) x U(+-20 s) x U(0.9 s, 5 s), i.e. x, y in +-1.048 m and z in [0.0472, 0.262] m;
* orientation rot(normalise(U(+-1)^3), U(+-1)·pi/6) (from the identity);
* position and orientation drawn again, per cube, until every corner is at least 1e-3 m above the ground;
* body-frame angular velocity in [-10, 12] x [-10, 8] x [-7, 4] rad/s and body-frame linear velocity in
  [+-3.5] x [+-3.5] x [-1, 0.2] m/s, rotated to the world (Newton's free joint carries the COM velocity, which
  for a cube is its origin's: the release's twist v_o = p x w + R·nu has COM velocity R·nu).

Variants (``robot_variant``): ``"sim"`` is the release's cube above. ``"real"`` is a deliberately *mismatched* ground
truth standing in for the paper's real toss data (which is not public), for the fine-tuning demonstration
(``studies/cube_finetune/cube_finetune.py``, docs/notebook/results.md): twice the friction coefficient (mu 0.3), a 3x
stiffer contact spring (ke 3e4) and a 10x weaker contact damper (kd 1e2), so it slides less and bounces (the release's
contact is overdamped and does not bounce). Both are the same robot (same state, same 8 corners), so they are
interchangeable for models (``robot_variants_interchangeable``): a sim-trained model may be fine-tuned on "real"
data and evaluated against the "real" ground truth. The variant is still recorded in every dataset's and
checkpoint's robot signature.
"""

from __future__ import annotations

import math
from typing import ClassVar

import newton
import torch
import warp as wp

from nerd.envs.environment import Environment, uniform
from nerd.frames import quat_from_axis_angle, quat_rotate

HALF_EXTENT = 0.0524  # [m]
DENSITY = 1000.0  # [kg/m^3]
MASS = 1.1510227  # [kg] = DENSITY * (2 * HALF_EXTENT)^3, what the release's builder computed
INERTIA = 0.00210695  # [kg·m^2] diagonal of the inertia about the centre, MASS * (2 * HALF_EXTENT)^2 / 6
CONTACT_THICKNESS = 1.0e-5  # [m] the release's thickness of the cube's box and of its ground plane, each
CORNER_SIGNS = tuple((sx, sy, sz) for sz in (-1, 1) for sy in (-1, 1) for sx in (-1, 1))
"""Corner i of the release's ``get_box_vertex``: x from bit 0, y from bit 1, z from bit 2 (-, +, -+ order)."""
START_HEIGHT = 1.5 * HALF_EXTENT  # [m] the release's default joint_q z
ROBOT_VARIANTS: dict[str, dict[str, float]] = {
    "sim": {"ke": 1.0e4, "kd": 1.0e3, "kf": 50.0, "mu": 0.15},
    "real": {"ke": 3.0e4, "kd": 1.0e2, "kf": 50.0, "mu": 0.3},
}
"""Contact material of each variant (cube and ground alike): ``"sim"`` the release's, ``"real"`` the mismatched
stand-in for real data (module docstring)."""
# Reset / data sampler (the release's reset_cube), in units of HALF_EXTENT where it used them.
RESET_XY_RANGE = 20.0 * HALF_EXTENT  # [m]
RESET_Z_RANGE = (0.9 * HALF_EXTENT, 5.0 * HALF_EXTENT)  # [m]
RESET_TILT_RANGE = math.pi / 6  # [rad]
RESET_MIN_CORNER_HEIGHT = 1.0e-3  # [m]
RESET_ANG_VEL_RANGE = ((-10.0, -10.0, -7.0), (12.0, 8.0, 4.0))  # [rad/s] body frame, (low, high)
RESET_LIN_VEL_RANGE = ((-3.5, -3.5, -1.0), (3.5, 3.5, 0.2))  # [m/s] body frame, (low, high)
_MAX_RESAMPLES = 1000


def corner_points() -> torch.Tensor:
    """(8, 3) corners of the cube in its body frame [m], in the release's order (:data:`CORNER_SIGNS`)."""
    return HALF_EXTENT * torch.tensor(CORNER_SIGNS, dtype=torch.float32)


class CubeToss(Environment):
    """Passive free cube, 7/6 DoF, no actuator, 8 corner contact candidates, 1.151 kg (module docstring)."""

    name = "CubeToss"
    frame_dt = 1.0 / 148.0
    sim_substeps = 20
    states_frame = "body"
    anchor_body = 0
    mass_matrix_refresh = "substep"
    contact_friction = "huber"
    robot_variants: ClassVar[tuple[str, ...]] = tuple(ROBOT_VARIANTS)
    robot_variants_interchangeable = True
    passive_metrics = {
        "base_position_error": ("position", ()),
        "base_orientation_error": ("orientation", ()),
    }

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add the cube: one box on a free joint, with the variant's contact material."""
        material = ROBOT_VARIANTS[self.robot_variant]
        cfg = newton.ModelBuilder.ShapeConfig(density=DENSITY, margin=2.0 * CONTACT_THICKNESS, **material)
        cube = builder.add_link(xform=wp.transform((0.0, 0.0, START_HEIGHT), wp.quat_identity()), label="cube")
        builder.add_shape_box(cube, hx=HALF_EXTENT, hy=HALF_EXTENT, hz=HALF_EXTENT, cfg=cfg)
        builder.add_articulation([builder.add_joint_free(cube, label="root")], label="cube")

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """No actuator: (N, 0) torques for (N, 0) actions."""
        return actions[:, :0]

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release's random cube reset (module docstring), (n, 13), world frame."""
        position, quat = self._sample_poses(n, generator)
        ang = uniform(*RESET_ANG_VEL_RANGE, n, generator)
        lin = uniform(*RESET_LIN_VEL_RANGE, n, generator)
        states = torch.cat([position, quat, quat_rotate(quat, lin), quat_rotate(quat, ang)], dim=1)
        return states.to(self.torch_device)

    def sample_random_torques(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """No actuator: (n, 0)."""
        return torch.zeros(n, 0, device=self.torch_device)

    @staticmethod
    def _sample_poses(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions (n, 3) and orientations (n, 4) with every corner >= 1e-3 m above the ground."""
        position = torch.empty(n, 3)
        quat = torch.empty(n, 4)
        todo = torch.arange(n)
        corners = corner_points()
        for _ in range(_MAX_RESAMPLES):
            m = len(todo)
            low = (-RESET_XY_RANGE, -RESET_XY_RANGE, RESET_Z_RANGE[0])
            high = (RESET_XY_RANGE, RESET_XY_RANGE, RESET_Z_RANGE[1])
            p = uniform(low, high, m, generator)
            axis = uniform([-1.0] * 3, [1.0] * 3, m, generator)
            angle = uniform(-RESET_TILT_RANGE, RESET_TILT_RANGE, m, generator).squeeze(1)
            q = quat_from_axis_angle(axis, angle)
            lowest = p[:, 2] + quat_rotate(q[:, None, :].expand(m, 8, 4), corners.expand(m, 8, 3))[..., 2].amin(1)
            ok = lowest >= RESET_MIN_CORNER_HEIGHT
            position[todo[ok]], quat[todo[ok]] = p[ok], q[ok]
            todo = todo[~ok]
            if len(todo) == 0:
                return position, quat
        raise RuntimeError("CubeToss: the reset sampler found no pose above the ground")  # not reachable in practice
