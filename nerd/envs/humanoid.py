"""Humanoid: the 21-joint MuJoCo humanoid that Newton ships (``newton/examples/assets/nv_humanoid.xml``), the body
of the Isaac Gym / Isaac Lab humanoid locomotion task. Not one of the paper's robots: the first NeRD humanoid.

Loaded with Newton's MJCF importer, Z-up: the file's 13 bodies and their inertias (capsules and spheres of
density 1000, 40.844 kg in all), its joints, limits, armatures and passive joint springs and damping (Featherstone
applies both). What we set ourselves:

* The file's sites and floor plane are not imported: the ground is each env's plane (:mod:`nerd.envs.contacts`).
* Newton merges the hinges of one body into one joint, in the file's order, so ``joint_q = [torso p (3), quat xyzw
  (4), the 21 hinge angles of :data:`HINGES`]`` and ``joint_qd = [torso COM velocity (3), ω (3), 21 hinge rates]``
  (world axes, Newton's free-joint convention).
* Ground contacts (:data:`CONTACT_SHAPES`): the trunk (torso, upper and lower waist, pelvis), the shins, the four
  foot capsules and the hands, 22 candidates (capsule end points, hand centres). The thighs, upper and lower arms
  and the head pass through the ground: a humanoid that would put them down has fallen, which ends the run task.
* Contact material: ke 7e4, kd 550, kf 2e3, the Ant's (our other legged robot's), and the file's friction
  mu 1.0. The file's soft contact (``solref`` 0.015, which Newton turns into ke 4444) lets the 40 kg body sink 9 cm
  into a penalty contact.
* Joint limits: Newton's limit spring as imported (ke 1e4, kd 10).
* Stepping: frame 1/60 s (Isaac Gym's), 16 Featherstone substeps and the mass matrix once per frame, as the Ant.

Torque control (Isaac Gym's ``power_scale`` 1): τ_i = clamp(a_i, ±1) · gear_i, with the file's motor gears
(:data:`HINGES`, 22.5 to 135 N·m).

Distributions:

* task reset (:meth:`Humanoid.sample_reset_states`, IsaacGymEnvs' ``Humanoid.reset_idx``): torso 1.34 m up,
  upright and at rest; hinges U(±0.2) rad clamped to their limits; hinge rates U(±0.1) rad/s;
* data generation (:meth:`Humanoid.sample_initial_states`, the release's Ant sampler restated for this body): torso
  x, y U(±10) m, height U[1.3, 1.6] m (the feet hang 1.29 m below the torso, so no body starts in the ground),
  tilted by U(±π/2) about a random body axis; hinges uniform within their limits; body-frame angular velocity
  U(±π) rad/s and COM velocity U(±1) m/s; hinge rates U(±2π) rad/s; torques white noise in ±gear per hinge.

Task on this robot: ``run`` (:mod:`nerd.rl.tasks.humanoid`).
"""

from __future__ import annotations

import math

import newton
import newton.examples
import torch
import warp as wp

from nerd.envs.environment import Environment, uniform
from nerd.frames import quat_from_axis_angle, quat_rotate

ASSET = "nv_humanoid.xml"
"""Newton's humanoid asset (``newton.examples.get_asset``): offline, in the wheel."""
HINGES = (
    # (name, lower [deg], upper [deg], motor gear [N·m]) in joint_q order (the file's)
    ("abdomen_z", -45.0, 45.0, 67.5), ("abdomen_y", -75.0, 30.0, 67.5), ("abdomen_x", -35.0, 35.0, 67.5),
    ("right_hip_x", -25.0, 5.0, 45.0), ("right_hip_z", -60.0, 35.0, 45.0), ("right_hip_y", -80.0, 20.0, 135.0),
    ("right_knee", -160.0, 2.0, 90.0), ("right_ankle_y", -50.0, 50.0, 22.5), ("right_ankle_x", -50.0, 50.0, 22.5),
    ("left_hip_x", -25.0, 5.0, 45.0), ("left_hip_z", -60.0, 35.0, 45.0), ("left_hip_y", -80.0, 20.0, 135.0),
    ("left_knee", -160.0, 2.0, 90.0), ("left_ankle_y", -50.0, 50.0, 22.5), ("left_ankle_x", -50.0, 50.0, 22.5),
    ("right_shoulder1", -60.0, 60.0, 67.5), ("right_shoulder2", -60.0, 60.0, 67.5), ("right_elbow", -90.0, 50.0, 45.0),
    ("left_shoulder1", -60.0, 60.0, 67.5), ("left_shoulder2", -60.0, 60.0, 67.5), ("left_elbow", -90.0, 50.0, 45.0),
)
"""The 21 hinges: the file's names, limits and motor gears (a test reads them back from the asset)."""
GEARS = tuple(gear for *_, gear in HINGES)
"""Torque per unit action of each hinge [N·m], in joint order."""
HINGE_LOWER = tuple(math.radians(low) for _, low, _, _ in HINGES)
HINGE_UPPER = tuple(math.radians(high) for _, _, high, _ in HINGES)
"""Lower and upper limits of the hinges [rad], in joint order."""
CONTACT_SHAPES = ("torso", "upper_waist", "lower_waist", "butt", "right_shin", "right_right_foot", "left_right_foot",
                  "left_shin", "left_left_foot", "right_left_foot", "right_hand", "left_hand")
"""The file's geoms that touch the ground (module docstring), in shape order."""
CONTACT_KE, CONTACT_KD, CONTACT_KF, CONTACT_MU = 7.0e4, 550.0, 2.0e3, 1.0
START_HEIGHT = 1.34  # [m] torso height of the task reset (IsaacGymEnvs')
RESET_HINGE_RANGE = 0.2  # [rad]
RESET_HINGE_VEL_RANGE = 0.1  # [rad/s]
INIT_HEIGHT_RANGE = (1.3, 1.6)  # [m]
INIT_HORIZONTAL_RANGE = 10.0  # [m]
INIT_TILT_RANGE = math.pi / 2  # [rad]
INIT_ANG_VEL_RANGE = math.pi  # [rad/s], torso axes
INIT_LIN_VEL_RANGE = 1.0  # [m/s], torso axes
INIT_HINGE_VEL_RANGE = 2.0 * math.pi  # [rad/s]
NUM_HINGES = len(HINGES)


def hinge_limits() -> tuple[torch.Tensor, torch.Tensor]:
    """Lower and upper limits (21,) [rad] of the hinges in joint order, as tensors."""
    return torch.tensor(HINGE_LOWER), torch.tensor(HINGE_UPPER)


class Humanoid(Environment):
    """MuJoCo humanoid, 28/27 DoF (free torso + 21 hinges), 22 contact candidates, 40.844 kg."""

    name = "Humanoid"
    random_torque_box = GEARS
    """Hinge torques uniform in ±gear (the whole action range)."""
    frame_dt = 1.0 / 60.0
    sim_substeps = 16
    states_frame = "body"
    anchor_body = 0
    hinge_labels = tuple(name for name, *_ in HINGES)
    passive_metrics = {
        "base_position_error": ("position", ()),
        "base_orientation_error": ("orientation", ()),
        "joint_position_error": ("abs", tuple(range(7, 7 + NUM_HINGES))),
    }

    def __init__(self, num_envs: int, **kwargs):
        super().__init__(num_envs, **kwargs)
        self._gears = torch.tensor(GEARS, device=self.torch_device)  # made once: the controller runs every frame

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Import the asset (torso on a free joint at the reset height) and set the ground contacts' shapes and
        material (module docstring)."""
        first = builder.shape_count
        builder.add_mjcf(newton.examples.get_asset(ASSET), xform=wp.transform((0.0, 0.0, START_HEIGHT),
                                                                              wp.quat_identity()),
                         parse_sites=False, parse_visuals=False, ignore_names=("floor",))
        for shape in range(first, builder.shape_count):
            if builder.shape_label[shape].rsplit("/", 1)[-1] in CONTACT_SHAPES:
                builder.shape_material_ke[shape] = CONTACT_KE
                builder.shape_material_kd[shape] = CONTACT_KD
                builder.shape_material_kf[shape] = CONTACT_KF
                builder.shape_material_mu[shape] = CONTACT_MU
            else:
                builder.shape_flags[shape] &= ~int(newton.ShapeFlags.COLLIDE_SHAPES)

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Hinge torques = clamp(a, -1, 1) * gear."""
        return actions.clamp(-1.0, 1.0) * self._gears

    def default_states(self, n: int) -> torch.Tensor:
        """Upright and at rest, torso 1.34 m up, every hinge at 0 (inside every limit), (n, 55)."""
        states = torch.zeros(n, self.state_dim)
        states[:, 2] = START_HEIGHT
        states[:, 6] = 1.0
        return states.to(self.torch_device)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """IsaacGymEnvs' humanoid reset (module docstring), (n, 55), world frame."""
        states = self.default_states(n).cpu()
        lower, upper = hinge_limits()
        offsets = uniform([-RESET_HINGE_RANGE] * NUM_HINGES, [RESET_HINGE_RANGE] * NUM_HINGES, n, generator)
        states[:, 7 : 7 + NUM_HINGES] = torch.maximum(torch.minimum(offsets, upper), lower)
        states[:, 34:] = uniform([-RESET_HINGE_VEL_RANGE] * NUM_HINGES, [RESET_HINGE_VEL_RANGE] * NUM_HINGES, n,
                                 generator)
        return states.to(self.torch_device)

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The data sampler (module docstring), (n, 55), world frame."""
        horizontal = uniform([-INIT_HORIZONTAL_RANGE] * 2, [INIT_HORIZONTAL_RANGE] * 2, n, generator)
        height = uniform(INIT_HEIGHT_RANGE[0], INIT_HEIGHT_RANGE[1], n, generator)
        axis = uniform([-1.0] * 3, [1.0] * 3, n, generator)
        angle = uniform(-INIT_TILT_RANGE, INIT_TILT_RANGE, n, generator).squeeze(1)
        quat = quat_from_axis_angle(axis, angle)
        lower, upper = hinge_limits()
        hinges = uniform(lower.tolist(), upper.tolist(), n, generator)
        # Velocities are drawn in the torso frame and rotated to the world (Newton's free-joint convention).
        lin = quat_rotate(quat, uniform([-INIT_LIN_VEL_RANGE] * 3, [INIT_LIN_VEL_RANGE] * 3, n, generator))
        ang = quat_rotate(quat, uniform([-INIT_ANG_VEL_RANGE] * 3, [INIT_ANG_VEL_RANGE] * 3, n, generator))
        rates = uniform([-INIT_HINGE_VEL_RANGE] * NUM_HINGES, [INIT_HINGE_VEL_RANGE] * NUM_HINGES, n, generator)
        states = torch.cat([horizontal, height, quat, hinges, lin, ang, rates], dim=1)
        return states.to(self.torch_device)
