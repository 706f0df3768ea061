"""PendulumWithContact: a double pendulum whose capsule links can hit a ground plane.

Two links of 1.5 m, each a capsule along the link (radius 0.1 m, cylinder half-length 0.75 m, density
500 kg/m^3), hinged about the horizontal y axis; the first pivot is 2 m above the world origin and the second
at the end of link 1. q = 0 puts both links horizontal along +x; positive angles turn the links' tips
downwards (right-hand rule about +y). The joint limits span +-2 pi with zero stiffness, so both joints are
effectively free and are treated as continuous. The friction coefficient is not fixed by the release's
description; Newton's default (mu = 1.0) is kept.

Ground configurations are a command-line choice: plane through (0, 0, offset) with normal
R(xyz Euler, extrinsic) * (0, 0, 1). Data generation instead draws a random plane per trajectory.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import newton
import torch
import warp as wp

from nerd.envs.environment import Environment, uniform
from nerd.errors import UserError
from nerd.frames import quat_from_euler_xyz, quat_rotate

LINK_LENGTH = 1.5  # [m]
LINK_RADIUS = 0.1  # [m]
DENSITY = 500.0  # [kg/m^3]
ARMATURE = 0.1
PIVOT_HEIGHT = 2.0  # [m] first pivot above the world origin
JOINT_LIMIT = 2.0 * math.pi  # [rad], zero limit stiffness: effectively unlimited
CONTACT_KE, CONTACT_KD, CONTACT_KF = 1.0e4, 1.0e3, 1.0e4
ACTION_SCALE = 1500.0  # [N·m] per unit action
# Data generation (the release's ranges).
INIT_Q_RANGE = (math.pi, math.pi)
INIT_QD_RANGE = (2.0 * math.pi, 4.0 * math.pi)
TORQUE_NOISE_SCALE = (1500.0, 1500.0)
RESET_QD_RANGE = 2.0  # [rad/s] the env's random reset (reset_init_state_pendulum): both rates in +-2
RANDOM_PLANE_MAX_DEPTH = 3.5  # [m] 'release' planes lie at most this far below the root (the links reach 3.1 m)
GROUND_PLANE_RULES = ("release",)
"""How data generation draws a trajectory's random plane (:meth:`PendulumWithContact.sample_ground_planes`): the
release's rule, the one recorded in a dataset's ``ground_plane_rule`` attribute."""

GROUND_CONFIGS: dict[int, tuple[float, tuple[float, float, float]]] = {
    0: (-15.5, (0.0, 0.0, 0.0)),  # never touched: contact-free
    1: (0.0, (0.0, 0.0, 0.0)),
    2: (0.2, (math.pi / 8, math.pi / 16, math.pi / 16)),
    3: (0.5, (0.0, 0.0, 0.0)),
    4: (-0.5, (0.0, 0.0, 0.0)),
    5: (-0.3, (0.0, 0.0, 0.0)),
    6: (0.0, (math.pi / 8, 0.0, 0.0)),
}
"""Ground configuration id -> (offset [m] along world z, plane rotation as xyz Euler angles [rad])."""


class PendulumWithContact(Environment):
    """Double pendulum with 4 contact candidates (the capsules' end points), 2 DoF, both actuated."""

    name = "PendulumWithContact"
    random_torque_box = TORQUE_NOISE_SCALE
    """Torques uniform in ±1500 N·m on both joints."""
    frame_dt = 1.0 / 60.0
    sim_substeps = 5
    states_frame = "body"
    continuous_q_indices = (0, 1)
    anchor_body = 0
    ground_plane_rules = GROUND_PLANE_RULES
    # The release's eval_passive_motion.py: base_orientation_idx = [0], joint_idx = [1].
    passive_metrics = {"base_orientation_error": ("abs", (0,)), "joint_position_error": ("abs", (1,))}

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add two capsule links joined by revolute joints about +y."""
        cfg = newton.ModelBuilder.ShapeConfig(density=DENSITY, ke=CONTACT_KE, kd=CONTACT_KD, kf=CONTACT_KF)
        # Capsules extend along their local z; turn z onto the link's +x axis.
        along_x = wp.quat_from_axis_angle(wp.vec3(0.0, 1.0, 0.0), math.pi / 2)
        half = 0.5 * LINK_LENGTH
        links, joints = [], []
        for i in range(2):
            link = builder.add_link(label=f"link_{i}")
            builder.add_shape_capsule(
                link, xform=wp.transform((half, 0.0, 0.0), along_x), radius=LINK_RADIUS, half_height=half, cfg=cfg
            )
            pivot = (0.0, 0.0, PIVOT_HEIGHT) if i == 0 else (LINK_LENGTH, 0.0, 0.0)
            parent_xform = wp.transform(pivot, wp.quat_identity())
            joints.append(
                builder.add_joint_revolute(
                    links[-1] if links else -1, link, parent_xform=parent_xform, axis=(0.0, 1.0, 0.0),
                    limit_lower=-JOINT_LIMIT, limit_upper=JOINT_LIMIT, limit_ke=0.0, limit_kd=0.0,
                    armature=ARMATURE, label=f"joint_{i}",
                )
            )
            links.append(link)
        builder.add_articulation(joints, label="pendulum")

    @staticmethod
    def ground_plane(config_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Normal (3,) and a point (3,) of ground configuration ``config_id``, world frame."""
        if config_id not in GROUND_CONFIGS:
            raise UserError(f"unknown contact config {config_id}; valid ids: {sorted(GROUND_CONFIGS)}")
        offset, euler = GROUND_CONFIGS[config_id]
        normal = quat_rotate(quat_from_euler_xyz(torch.tensor(euler)), torch.tensor([0.0, 0.0, 1.0]))
        return normal, torch.tensor([0.0, 0.0, offset])

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint torques = clamp(a, -1, 1) * 1500 N·m."""
        return actions.clamp(-1.0, 1.0) * ACTION_SCALE

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Angles in [-pi, pi], rates in [-2 pi, 2 pi] (joint 0) and [-4 pi, 4 pi] (joint 1)."""
        high = (*INIT_Q_RANGE, *INIT_QD_RANGE)
        return uniform([-h for h in high], high, n, generator).to(self.torch_device)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release env's random reset (``reset_init_state_pendulum``), which its passive evaluation starts from:
        q0 uniform in [-pi, pi], the second link's absolute angle q0 + q1 uniform over the half turn that points it
        upwards (wrapped into [-pi, pi]), both rates in [-2, 2] rad/s. The release's links turn upwards for
        positive angles (a +z hinge in its Y-up world), ours downwards (+y hinge, Z-up), so its angles are ours
        negated."""
        u = torch.rand(n, 4, generator=generator)
        q0 = math.pi * (2.0 * u[:, 0] - 1.0)
        q1 = -q0 + math.pi * u[:, 1]  # the release's q0 + q1 in [0, pi]
        q1 = torch.where(q1 > math.pi, q1 - 2.0 * math.pi, q1)
        qd = RESET_QD_RANGE * (2.0 * u[:, 2:] - 1.0)
        return -torch.cat([q0[:, None], q1[:, None], qd], dim=1).to(self.torch_device)

    @staticmethod
    def sample_ground_planes(
        contact_points: torch.Tensor, contact_thicknesses: torch.Tensor, root_positions: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random planes for data generation: a normal uniform on the sphere and an offset along it below every
        contact point of the initial state (radius included), so that each trajectory starts out of contact.

        The offset is uniform between 3.5 m below the root and the lowest contact point, as the release's pendulum
        sampler draws it (the ``"release"`` rule of :data:`GROUND_PLANE_RULES`); about 7.5 % of the steps have a
        capsule within its radius of the plane.

        The release draws the normal uniformly in the cube [-1, 1]^3 before normalising it, which slightly favours
        diagonal normals; this project draws them uniformly on the sphere.

        Args:
            contact_points: (n, C, 3) candidate points of the initial states [m], world frame.
            contact_thicknesses: (n, C) candidate radii [m].
            root_positions: (n, 3) the root body's origin (the first pivot) [m], world frame.

        Returns:
            normals (n, 3) and plane points (n, 3), world frame.
        """
        n = contact_points.shape[0]
        normals = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator), dim=-1)
        points, thickness = contact_points.cpu(), contact_thicknesses.cpu()
        highest = ((points * normals[:, None]).sum(-1) - thickness).min(dim=1).values
        lowest = (root_positions.cpu() * normals).sum(-1) - RANDOM_PLANE_MAX_DEPTH
        offset = lowest + (highest - lowest) * torch.rand(n, generator=generator)
        return normals, offset[:, None] * normals

    @staticmethod
    def link_length_parameters(lengths: torch.Tensor,
                               default: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Newton model parameters of pendulums with link lengths ``lengths`` (B, 2) [m], differentiable in them
        (NeuralSim's double-pendulum identification; the values for :class:`nerd.diffsim.GroundTruthRollout`).

        A link of length l keeps its mass: its centre of mass sits at l / 2, its inertia across the link scales
        with (l / 1.5 m)^2 (a rod's; the capsule's end caps are not re-shaped) and link 0's length places the
        second pivot. ``default(name)`` gives the robot's own value of one copy (``GroundTruthRollout.parameter``).
        """
        b = lengths.shape[0]
        scale = lengths / LINK_LENGTH  # (B, 2)
        along_link = torch.zeros(3, dtype=lengths.dtype)
        along_link[0] = 1.0
        com = default("body_com").to(lengths.dtype).expand(b, -1, -1)
        com = com * (1.0 + along_link * (scale[..., None] - 1.0))
        across = torch.zeros(3, 3, dtype=lengths.dtype)
        across[1, 1] = across[2, 2] = 1.0
        inertia = default("body_inertia").to(lengths.dtype).expand(b, -1, -1, -1)
        inertia = inertia * (1.0 + across * (scale[..., None, None] ** 2 - 1.0))
        pivot = torch.zeros(2, 7, dtype=lengths.dtype)
        pivot[1, 0] = 1.0  # joint 1's x position in link 0
        x_p = default("joint_X_p").to(lengths.dtype).expand(b, -1, -1)
        x_p = x_p * (1.0 + pivot * (scale[:, :1, None] - 1.0))
        return {"body_com": com, "body_inertia": inertia, "joint_X_p": x_p}
