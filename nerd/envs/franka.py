"""Franka: the Panda arm of the NeRD release's ``FrankaReach`` (fixed base, 7 revolute joints, fixed gripper).

Built in code from the release's numbers (no asset): 7 bodies ``panda_link1..7``, each hinged about its local z axis
to the previous one (link 1 to the world) at the URDF joint origins ``JOINT_ORIGINS``; joint order = body
order. Link 0 is the static base at the world origin; link 8, the hand and the fingers are merged into link 7
(the release collapsed its fixed joints).

Inertials: the release's URDF has no ``<inertial>`` tags, so its importer derived COM and inertia from the
collision meshes at density 3500 and the env then overwrote the **masses only** ("Isaac Lab" values). Two
builds of that exist: warp.sim >= 1.8 and warp.sim <= 1.7 (mesh COM/inertia from the vertex
mean, child inertia added once per child shape). We use the **warp.sim >= 1.8 table**
(``robots_numbers.json`` key ``franka_warp_1_8_to_1_9``): it is what the release's code builds under the
warp version its README pins (1.8.0), and the older build's COM/inertia come from an importer bug fixed in
1.8. The released Franka checkpoint was probably trained on the older build (its logdir predates warp 1.8),
which is inferred, not proven; the arm's kinematics are the same in both. The inertias include warp.sim's
body armature (0.01·E per merged URDF link), which Newton does not have, so the dynamics match the release's.
Joint armature 0.01; limits ±2π with zero limit stiffness and damping (unlimited), so all 7 joints are
continuous and wrapped into [−π, π). Gravity is off, as in the release.

Contacts: the release listed 10 contact candidates (one per collision mesh) but had no ground, so their
depths stayed at 1000 and they never acted; its NeRD model took states and torques only (token width 21).
Here the arm has **no collision shapes, hence zero contact candidates**, the same "no contacts" as Cartpole:
no contact set for the solver, (N, 0, ·) contact features, and tokens of ``states (14) + joint_acts (7) = 21``.

Controls (the release's, once per frame from the start-of-frame state, ``control_mode``):

* ``"torque"``: τ = clamp(a, ±1)·[87, 87, 87, 87, 12, 12, 12] N·m, one frame per policy action;
* ``"position"``: joint-position PD towards target = q + 0.03125·a,
  τ = clamp(Kp·(target − q) − Kd·q̇, ±[87×4, 12×3]) = clamp(Kp·0.03125·a − Kd·q̇, ...); actions are not clamped
  (the RL vec env clamps them to [−1, 1], as rl-games did); two frames per policy action (``control_steps``),
  the target recomputed from the current q each frame. The PD law itself is the one ANYmal uses
  (:func:`nerd.envs.control.joint_pd_torques`).

Distributions: data generation (the release's ``sample`` mode) draws q ~ U[−10, 10] wrapped to [−π, π),
q̇ ~ U[−π, π] and i.i.d. torques U[±[100×4, 20×3]] every frame; the RL reset is the default pose ± 0.125 rad
per joint at rest.
"""

from __future__ import annotations

import math

import newton
import torch
import warp as wp

from nerd.device_constants import device_constant
from nerd.envs.control import joint_pd_torques
from nerd.envs.environment import Environment, uniform
from nerd.errors import UserError
from nerd.frames import quat_from_axis_angle, quat_mul, quat_rotate, wrap_angle

JOINTS = 7
ARMATURE = 0.01
JOINT_LIMIT = 2.0 * math.pi  # [rad], zero limit stiffness: effectively unlimited
_S = math.sqrt(0.5)
JOINT_ORIGINS = (
    ((0.0, 0.0, 0.333), (0.0, 0.0, 0.0, 1.0)),
    ((0.0, 0.0, 0.0), (-_S, 0.0, 0.0, _S)),  # rpy(-pi/2, 0, 0)
    ((0.0, -0.316, 0.0), (_S, 0.0, 0.0, _S)),  # rpy(pi/2, 0, 0)
    ((0.0825, 0.0, 0.0), (_S, 0.0, 0.0, _S)),
    ((-0.0825, 0.384, 0.0), (-_S, 0.0, 0.0, _S)),
    ((0.0, 0.0, 0.0), (_S, 0.0, 0.0, _S)),
    ((0.088, 0.0, 0.0), (_S, 0.0, 0.0, _S)),
)
"""Parent-frame pose (position [m], quaternion xyzw) of each joint's frame: the URDF joint origins. Each joint
turns its child about the joint frame's z axis; the child's body frame is the joint frame."""
EE_OFFSET = (0.0, 0.0, 0.21207)  # [m] end effector in link 7's frame (the release's EE marker)
DEFAULT_Q = (0.0, -0.7853, 0.0, -2.3575, 0.0, 1.5703, 0.7857)  # [rad] the release's default pose

# Inertials of the warp.sim >= 1.8 build (module docstring): mass [kg], COM in the body frame [m], inertia about
# the COM in the body frame [kg·m^2] (xx, yy, zz, xy, xz, yz).
LINK_MASSES = (2.9281, 2.8215, 2.8565, 2.1814, 2.2329, 3.2655, 2.4965)
LINK_COMS = (
    (1.139922e-05, -0.03126553, -0.06937327),
    (-1.317593e-05, -0.07032157, 0.03117825),
    (0.04434831, 0.02492833, -0.03812998),
    (-0.03855031, 0.03952561, 0.02471625),
    (-6.367727e-05, 0.03841236, -0.10997016),
    (0.05100229, 0.006932671, 0.006168994),
    (0.003587927, 0.003589578, 0.1137687),
)
LINK_INERTIAS = (
    (0.07167072, 0.06341495, 0.03491900, 1.485283e-06, 4.012384e-06, 0.01203782),
    (0.07304954, 0.03518148, 0.06471234, -7.107644e-06, -2.465358e-06, -0.01223523),
    (0.03591971, 0.04126872, 0.03620112, -0.005046795, -0.008623450, -0.004659165),
    (0.03702708, 0.03675031, 0.04249585, 0.008963139, -0.005144289, 0.004845979),
    (0.1144368, 0.1049476, 0.03705638, -3.246832e-05, -0.0001393589, -0.02053113),
    (0.01811421, 0.02239172, 0.02509874, -0.0005706129, 0.001030061, 0.0001020254),
    (0.08975105, 0.08975295, 0.06042831, -0.003827085, -0.0001583890, -0.0001590310),
)

TORQUE_LIMITS = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)  # [N·m] torque-mode scale and PD clip
PD_ACTION_SCALE = 0.03125  # [rad] target offset per unit action
PD_KP = (600.0, 600.0, 600.0, 600.0, 250.0, 150.0, 50.0)  # [N·m/rad]
PD_KD = (5.0, 5.0, 5.0, 5.0, 3.0, 2.5, 1.5)  # [N·m·s/rad]
CONTROL_MODES = ("torque", "position")
"""Controllers of :class:`Franka`: joint torque (the default), or the release's joint-position PD."""
CONTROL_STEPS = {"torque": 1, "position": 2}
"""Frames per policy action in RL tasks, per control mode (the release's ``control_steps``)."""
# Data generation (the release's ``sample`` mode).
INIT_Q_RANGE = 10.0  # [rad], wrapped into [-pi, pi)
INIT_QD_RANGE = math.pi  # [rad/s]
TORQUE_NOISE_SCALE = (100.0, 100.0, 100.0, 100.0, 20.0, 20.0, 20.0)  # [N·m]
# Task reset (the release's ``random_reset``).
RESET_Q_RANGE = 0.125  # [rad] around DEFAULT_Q, at rest
VISUAL_RADIUS = 0.06  # [m] viewer spheres at the joint origins (no mass, no collision)
EE_MARKER_RADIUS = 0.025  # [m]


def _mat33(xx: float, yy: float, zz: float, xy: float, xz: float, yz: float) -> wp.mat33:
    return wp.mat33(xx, xy, xz, xy, yy, yz, xz, yz, zz)


def end_effector_position(q: torch.Tensor) -> torch.Tensor:
    """Forward kinematics: world position [m] of the end effector, link 7 · ``EE_OFFSET``, from joint angles.

    Pure torch (differentiable, any device), so tasks and metrics compute it from states without a simulator.

    Args:
        q: (..., 7) joint angles [rad] (a Franka state's first 7 numbers).

    Returns:
        (..., 3) end-effector positions, world frame (the base is at the origin).
    """
    z = device_constant((0.0, 0.0, 1.0), q)
    pos = q.new_zeros(*q.shape[:-1], 3)
    rot = device_constant((0.0, 0.0, 0.0, 1.0), q).expand(*q.shape[:-1], 4)
    for i, (offset, quat) in enumerate(JOINT_ORIGINS):
        pos = pos + quat_rotate(rot, device_constant(offset, q).expand_as(pos))
        rot = quat_mul(quat_mul(rot, device_constant(quat, q)), quat_from_axis_angle(z, q[..., i]))
    return pos + quat_rotate(rot, device_constant(EE_OFFSET, q).expand_as(pos))


class Franka(Environment):
    """Franka Panda arm, 7/7 DoF, no contacts, gravity off; ``control_mode`` ``"torque"`` or ``"position"``.

    Args:
        control_mode: One of :data:`CONTROL_MODES` (what :meth:`compute_torques` does); the rest as
            :class:`~nerd.envs.environment.Environment`.
    """

    name = "Franka"
    random_torque_box = TORQUE_NOISE_SCALE
    """Torques uniform in ±[100×4, 20×3] N·m, bypassing the controller (the release's dataset)."""
    frame_dt = 1.0 / 120.0
    sim_substeps = 9
    gravity = 0.0
    states_frame = "world"
    continuous_q_indices = tuple(range(JOINTS))
    anchor_body = 0
    control_modes = CONTROL_MODES
    passive_metrics = {
        "joint_position_error": ("abs", tuple(range(JOINTS))),
        "end_effector_position_error": ("end_effector", ()),
    }

    def __init__(self, num_envs: int, device: str = "cpu", solver: str | None = None, use_graph: bool = True,
                 mass_matrix_refresh: str | None = None, contact_friction: str | None = None,
                 control_mode: str | None = None):
        control_mode = control_mode or CONTROL_MODES[0]
        if control_mode not in CONTROL_MODES:
            raise UserError(f"unknown control mode '{control_mode}' for Franka; valid: {', '.join(CONTROL_MODES)}")
        self.control_mode = control_mode
        self.control_steps = CONTROL_STEPS[control_mode]
        super().__init__(num_envs, device=device, solver=solver, use_graph=use_graph,
                         mass_matrix_refresh=mass_matrix_refresh, contact_friction=contact_friction)
        self._torque_limits = torch.tensor(TORQUE_LIMITS, device=self.torch_device)
        self._kp = torch.tensor(PD_KP, device=self.torch_device)
        self._kd = torch.tensor(PD_KD, device=self.torch_device)

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add links 1..7 with the release's inertials and the 7 revolute joints about local z."""
        visual = newton.ModelBuilder.ShapeConfig(density=0.0, has_shape_collision=False, has_particle_collision=False)
        parent, joints = -1, []
        for i in range(JOINTS):
            link = builder.add_link(mass=LINK_MASSES[i], com=wp.vec3(*LINK_COMS[i]),
                                    inertia=_mat33(*LINK_INERTIAS[i]), label=f"panda_link{i + 1}")
            builder.add_shape_sphere(link, radius=VISUAL_RADIUS, cfg=visual)
            offset, quat = JOINT_ORIGINS[i]
            joints.append(builder.add_joint_revolute(
                parent, link, parent_xform=wp.transform(offset, wp.quat(*quat)), axis=(0.0, 0.0, 1.0),
                limit_lower=-JOINT_LIMIT, limit_upper=JOINT_LIMIT, limit_ke=0.0, limit_kd=0.0, armature=ARMATURE,
                label=f"panda_joint{i + 1}",
            ))
            parent = link
        builder.add_shape_sphere(parent, xform=wp.transform(EE_OFFSET, wp.quat_identity()),
                                 radius=EE_MARKER_RADIUS, cfg=visual)
        builder.add_articulation(joints, label="franka")
        builder.joint_q[-JOINTS:] = list(DEFAULT_Q)

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint torques (N, 7) of the control mode (module docstring); PD reads the current state."""
        if self.control_mode == "torque":
            return actions.clamp(-1.0, 1.0) * self._torque_limits
        self.synchronize()
        q = self._joint_q
        return joint_pd_torques(q + PD_ACTION_SCALE * actions, q, self._joint_qd, self._kp, self._kd,
                                self._torque_limits)

    def end_effector_position(self, states: torch.Tensor) -> torch.Tensor:
        """End-effector positions (..., 3) [m], world frame, of states (..., 14) (:func:`end_effector_position`)."""
        return end_effector_position(states[..., :JOINTS])

    def default_states(self, n: int) -> torch.Tensor:
        """The release's default pose at rest, (n, 14)."""
        q = torch.tensor(DEFAULT_Q).expand(n, JOINTS)
        return torch.cat([q, torch.zeros(n, JOINTS)], dim=1).to(self.torch_device)

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """q ~ U[−10, 10] wrapped into [−π, π), q̇ ~ U[−π, π] per joint (the release's dataset sampler)."""
        q = wrap_angle(uniform([-INIT_Q_RANGE] * JOINTS, [INIT_Q_RANGE] * JOINTS, n, generator))
        qd = uniform([-INIT_QD_RANGE] * JOINTS, [INIT_QD_RANGE] * JOINTS, n, generator)
        return torch.cat([q, qd], dim=1).to(self.torch_device)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release's RL reset: the default pose + U[±0.125] rad per joint, at rest, (n, 14)."""
        states = self.default_states(n).cpu()
        states[:, :JOINTS] += uniform([-RESET_Q_RANGE] * JOINTS, [RESET_Q_RANGE] * JOINTS, n, generator)
        return states.to(self.torch_device)
