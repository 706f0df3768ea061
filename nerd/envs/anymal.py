"""Anymal: ANYmal C (free base + 4 legs of 3 revolute joints) as the NeRD release simulated it, built in code.

No mesh or URDF is needed for the physics: the 13 bodies, 12 joints and 9 primitive colliders are rebuilt here
from the numbers of the release's URDF after warp.sim's import (overrides
included), Z-up, with the base 0.7 m up and unturned (a release Y-up vector (X, Y, Z) is (X, −Z, Y)
here; body-frame numbers carry over unchanged).

* Bodies (mass [kg]): base 27.99286 (the release's base includes warp.sim's 0.01 kg "static links" merged into it,
  so its roll inertia is 8x that of the bare URDF), per leg HIP 2.51203, THIGH 3.27327, SHANK 0.55505; 53.354 kg in
  all. COMs and full inertias are the release's (below); the colliders carry no mass.
* Joints: HAA, HFE, KFE per leg, joint frames ``X_p`` after warp.sim's collapse of fixed joints, axes ±x,
  armature 0.06 on each revolute dof (0 on the free joint), HAA limits [−0.72, 0.49] (LF, LH) / [−0.49, 0.72]
  (RF, RH), HFE and KFE unlimited (±1e6, so NeRD treats them as continuous and wraps them), limit ke 1e3, kd 10.
* Colliders (shape order base, LF, RF, LH, RH): base capsule r 0.10, half-length 0.375 along body x; a knee
  capsule r 0.06, half-length 0.06 on each THIGH; a foot sphere r 0.03 on each SHANK. Contact material: the
  averages of the release's robot (ke 2e3, kd 5e2, kf 1e2, mu 0.75) and ground (warp.sim defaults ke 1e5, kd 1e3,
  kf 1e3, mu 0.5) materials, ke 51 000, kd 750, kf 550, mu 0.625 (our ground is not a shape, so the robot's
  shapes carry the averages). 14 contact candidates, in the release's order: base capsule +x and
  −x ends, then per leg LF, RF, LH, RH the knee capsule's +x and −x ends (thigh) and the foot centre (shank).
* Stepping: frame 1/60 s, 10 Featherstone substeps, mass matrix once per frame (the release's).

State and joint order (both variants): ``joint_q = [base p (3), base quat xyzw (4), RH, LH, RF, LF × (HAA, HFE,
KFE)]`` and ``joint_qd = [base COM velocity (3), ω (3), the 12 joint rates in the same order]`` (Newton's free-joint
convention, :mod:`nerd.envs.environment`). This is the release's joint order (warp.sim's import reversed the legs),
so states, torques (``joint_acts``) and actions line up index by index with the release's data and policies.

Two variants (``robot_variant``), chosen explicitly:

* ``"physical"`` (default): each joint's child body has the joint's index (bodies are created RH, LH, RF, LF like
  the joints), so Featherstone's joint-space mass matrix is the robot's. Free fall accelerates the COM at g.
* ``"release"``: bodies in URDF link order LF, RF, LH, RH while the joints stay RH, LH, RF, LF. Featherstone
  assembles the mass matrix with ``body_I[joint index]``, so each leg's joints see another leg's inertia (bias
  forces, gravity, contacts and actuation stay correct): the release's scrambled ground truth, whose free fall
  accelerates at about −15.8 m/s². Its data, NeRD model and published policies all come from it.

Controllers (``control_mode``), once per frame from the start-of-frame state, torques held over the substeps:

* ``"position"`` (default; the release's ``AnymalJointPositionControl``, RL and data): actions a in [−1, 1] give
  targets q_default + 0.5·a and torques τ = Kp·(target − q) − Kd·q̇, not clipped, Kp 85 and Kd 2 unless
  :meth:`Anymal.set_pd_gains` says otherwise (data generation draws Kp ~ U[30, 200], Kd ~ U[0, 1] per env and
  frame, or from our ``damped`` box, :data:`DATA_PD_GAINS`; the release drew one pair per frame shared by every
  env).
* ``"torque"`` (the release's ``Anymal``): τ = clamp(a, ±1)·[75, 60, 12] (HAA, HFE, KFE) + 85·(q_default − q).

Distributions (the release's), restated Z-up:

* data generation (:meth:`Anymal.sample_initial_states`, the release's dataset reset): base x, y ± 0.2 m, height
  U[0.65, 1.0] m, orientation rot(axis, angle) with axis = normalise(U(±1)³), angle U(±1)·π/6; joints
  q_default ± 0.2; body-frame ω ± 0.25 rad/s and base-origin velocity ± 0.1 m/s; joint rates ± 0.25 rad/s;
* task reset (:meth:`Anymal.sample_reset_states`, the release's RL reset): default base pose at rest, joints
  q_default·U[0.5, 1.5], joint rates 0.1·U(±1).

Both keep the release's off-by-one: the first joint's rate (RH_HAA) is never randomised.

Friction: Newton's Coulomb law by default, as for every robot (``contact_friction``); ``"huber"`` is the release's
warp.sim law. The release's published walking policies score like the paper's ground truth under
either law in the release variant; the numbers, per law and variant, are in docs/anymal.md.

Tasks on this robot: ``forward_walk`` and ``side_walk`` (:mod:`nerd.rl.tasks.anymal`). Data generation
(``random_control = "actions"``): random actions through the PD law with gains redrawn per env and frame; an env
that diverges under stiff gains (about 4 % of trajectories in the physical variant) is dropped with its trajectory.
"""

from __future__ import annotations

import math
from typing import ClassVar

import newton
import torch
import warp as wp

from nerd.envs.control import joint_pd_torques
from nerd.envs.environment import Environment, uniform
from nerd.errors import UserError
from nerd.frames import quat_from_axis_angle, quat_rotate

ROBOT_VARIANTS = ("physical", "release")
"""Mass-matrix variants of the ANYmal ground truth (module docstring); the first is the default."""
CONTROL_MODES = ("position", "torque")
"""Controllers between actions and joint torques (module docstring); the first is the default."""

LEGS = ("RH", "LH", "RF", "LF")
"""Legs in joint (and state) order: the release's."""
URDF_LEGS = ("LF", "RF", "LH", "RH")
"""Legs in the URDF's link order: the release's body, shape and contact order."""
JOINTS = ("HAA", "HFE", "KFE")

BASE_MASS = 27.99286  # [kg]
BASE_COM = (-0.018816, 0.006166, 0.009855)  # [m], body frame
BASE_INERTIA = ((1.305489, 0.000676, 0.050685), (0.000676, 2.743635, 0.001234), (0.050685, 0.001234, 2.829262))
HIP_MASS, THIGH_MASS, SHANK_MASS = 2.51203, 3.27327, 0.55505  # [kg]


def _sym(diag: tuple[float, float, float], off: tuple[float, float, float]) -> tuple[tuple[float, ...], ...]:
    """Symmetric 3x3 inertia [kg m^2] from its diagonal (xx, yy, zz) and off-diagonal (xy, xz, yz)."""
    (xx, yy, zz), (xy, xz, yz) = diag, off
    return ((xx, xy, xz), (xy, yy, yz), (xz, yz, zz))


# Leg link inertials (COM [m] and inertia about the COM, body frame). LF and RH share one set, RF and LH the
# mirrored one (y negated).
_HIP_I, _THIGH_I, _SHANK_I = (0.018094, 0.016296, 0.023709), (0.181374, 0.202557, 0.027634), (0.030702, 0.028281,
                                                                                               0.0026906)
LINK_INERTIALS = {
    # side "a": LF, RH; side "b": RF, LH
    ("HIP", "a"): ((0.056250, -0.011578, -0.005842), _sym(_HIP_I, (0.008263, 0.004754, -0.006388))),
    ("HIP", "b"): ((0.056356, 0.011578, -0.005842), _sym(_HIP_I, (-0.008252, 0.004747, 0.006388))),
    ("THIGH", "a"): ((0.020484, 0.003964, -0.224807), _sym(_THIGH_I, (-0.001098, 0.056456, -0.001839))),
    ("THIGH", "b"): ((0.020484, -0.003883, -0.224807), _sym(_THIGH_I, (0.001110, 0.056456, 0.001839))),
    ("SHANK", "a"): ((0.005576, -0.059078, -0.074016), _sym(_SHANK_I, (0.000225, 0.001024, -0.006521))),
    ("SHANK", "b"): ((0.005576, 0.059078, -0.074016), _sym(_SHANK_I, (-0.000225, 0.001024, 0.006521))),
}
LEG_SIDE = {"LF": "a", "RH": "a", "RF": "b", "LH": "b"}

# Joint frames X_p (position [m], quaternion xyzw) in the parent body frame, and axis sign (+-x), per leg.
_HFE_QUAT_LF_RH = (0.683013, -0.683013, -0.183013, -0.183013)
JOINT_FRAMES = {
    "LF": [((0.2999, 0.104, 0.0), (0.965926, 0.0, 0.0, 0.258819), 1.0),
           ((0.0599, -0.072582, -0.041905), (-0.683013, 0.683013, 0.183013, 0.183013), 1.0),
           ((0.1003, 0.0, -0.285), (0.0, 0.0, 0.0, 1.0), 1.0)],
    "RF": [((0.2999, -0.104, 0.0), (-0.965926, 0.0, 0.0, 0.258819), 1.0),
           ((0.0599, 0.072582, -0.041905), (0.683013, 0.683013, -0.183013, 0.183013), -1.0),
           ((0.1003, 0.0, -0.285), (0.0, 0.0, 0.0, 1.0), -1.0)],
    "LH": [((-0.2999, 0.104, 0.0), (0.0, 0.965926, -0.258819, 0.0), -1.0),
           ((0.0599, 0.072582, -0.041905), (0.683013, 0.683013, -0.183013, 0.183013), 1.0),
           ((0.1003, 0.0, -0.285), (0.0, 0.0, 0.0, 1.0), 1.0)],
    "RH": [((-0.2999, -0.104, 0.0), (0.0, -0.965926, -0.258819, 0.0), -1.0),
           ((0.0599, -0.072582, -0.041905), _HFE_QUAT_LF_RH, -1.0),
           ((0.1003, 0.0, -0.285), (0.0, 0.0, 0.0, 1.0), -1.0)],
}
HAA_LIMITS = {"LF": (-0.72, 0.49), "LH": (-0.72, 0.49), "RF": (-0.49, 0.72), "RH": (-0.49, 0.72)}  # [rad]
UNLIMITED = 1.0e6  # [rad] warp.sim's default limit for HFE and KFE (no URDF limit): never reached
ARMATURE = 0.06
JOINT_LIMIT_KE, JOINT_LIMIT_KD = 1.0e3, 10.0
# Contact material: the release's robot shapes and warp.sim's default ground, averaged (warp.sim's rule).
CONTACT_KE, CONTACT_KD, CONTACT_KF, CONTACT_MU = 2.0e3, 5.0e2, 1.0e2, 0.75
GROUND_KE, GROUND_KD, GROUND_KF, GROUND_MU = 1.0e5, 1.0e3, 1.0e3, 0.5
BASE_CAPSULE = (0.10, 0.375)  # [m] radius, half-length along body x, centred on the base origin
KNEE_CAPSULE = (0.06, 0.06, (0.0503, 0.0, -0.285))  # [m] radius, half-length along thigh x, centre in the thigh
FOOT_SPHERE = (0.03, (0.01305, 0.08795, -0.31547))  # [m] radius, centre in the shank (y negated for LF, RH)

START_HEIGHT = 0.7  # [m] base height of the default pose (feet 7.7 cm above the ground)
DEFAULT_JOINT_Q = {"LF": (-0.03, -0.4, 0.8), "RF": (0.03, -0.4, 0.8), "LH": (-0.03, 0.4, -0.8),
                   "RH": (0.03, 0.4, -0.8)}
"""[rad] The pose the release simulates (its code comment names the legs in the wrong order)."""
PD_KP, PD_KD = 85.0, 2.0  # the release's RL gains [N·m/rad], [N·m·s/rad]
ACTION_SCALE = 0.5  # [rad] target offset per unit action
TORQUE_SCALE = (75.0, 60.0, 12.0)  # [N·m] torque mode, per unit action (HAA, HFE, KFE)
TORQUE_MODE_KP = 85.0  # [N·m/rad] torque mode's spring to the default pose
# Data generation (the release's ranges and PD gain box).
DATA_PD_GAINS = {"release": ((30.0, 200.0), (0.0, 1.0)), "damped": ((30.0, 100.0), (1.0, 3.0))}
"""Data-generation gain boxes, (Kp range, Kd range) per name. ``release``: the release's sampler (default).
``damped``: ours, a box the held-over-a-frame PD law keeps stable on the physical robot; the release's box makes
most physical-variant trajectories oscillate to joint speeds of hundreds of rad/s (docs/anymal.md,
``studies/anymal_pd_stability/anymal_pd_stability.py``). Both contain the RL gains (85, 2)."""
INIT_XY_RANGE = 0.2  # [m]
INIT_HEIGHT_RANGE = (0.65, 1.0)  # [m]
INIT_TILT_RANGE = math.pi / 6  # [rad]
INIT_JOINT_RANGE = 0.2  # [rad]
INIT_ANG_VEL_RANGE = 0.25  # [rad/s] body frame
INIT_LIN_VEL_RANGE = 0.1  # [m/s] base-origin velocity, body frame
INIT_JOINT_VEL_RANGE = 0.25  # [rad/s]
# Task reset (the release's RL reset).
RESET_JOINT_SCALE = (0.5, 1.5)
RESET_JOINT_VEL_RANGE = 0.1  # [rad/s]
NUM_JOINTS = 12


def default_joint_q() -> torch.Tensor:
    """The default joint angles (12,) [rad] in joint order (RH, LH, RF, LF)."""
    return torch.tensor([v for leg in LEGS for v in DEFAULT_JOINT_Q[leg]])


def joint_names() -> list[str]:
    """Joint names in joint order, e.g. ``RH_HAA``."""
    return [f"{leg}_{j}" for leg in LEGS for j in JOINTS]


class Anymal(Environment):
    """ANYmal C, 19/18 DoF (free base + 12 revolute joints), 14 contact candidates, 53.354 kg.

    Args:
        robot_variant: ``"physical"`` (default) or ``"release"`` (module docstring).
        control_mode: ``"position"`` (default) or ``"torque"`` (module docstring).
        Other arguments: see :class:`~nerd.envs.environment.Environment`.
    """

    name = "Anymal"
    robot_variants: ClassVar[tuple[str, ...]] = ROBOT_VARIANTS
    control_modes: ClassVar[tuple[str, ...]] = CONTROL_MODES
    random_control = "actions"
    pd_gain_boxes = tuple(DATA_PD_GAINS)
    frame_dt = 1.0 / 60.0
    sim_substeps = 10
    states_frame = "body"
    anchor_body = 0
    continuous_q_indices = tuple(7 + 3 * leg + j for leg in range(4) for j in (1, 2))
    passive_metrics = {
        "base_position_error": ("position", ()),
        "base_orientation_error": ("orientation", ()),
        "joint_position_error": ("abs", tuple(range(7, 19))),
    }

    def __init__(self, num_envs: int, device: str = "cpu", solver: str | None = None, use_graph: bool = True,
                 mass_matrix_refresh: str | None = None, contact_friction: str | None = None,
                 robot_variant: str | None = None, control_mode: str | None = None):
        control_mode = control_mode or CONTROL_MODES[0]
        if control_mode not in CONTROL_MODES:
            raise UserError(f"unknown Anymal control mode '{control_mode}'; valid: {', '.join(CONTROL_MODES)}")
        self.control_mode = control_mode
        super().__init__(num_envs, device=device, solver=solver, use_graph=use_graph,
                         mass_matrix_refresh=mass_matrix_refresh, contact_friction=contact_friction,
                         robot_variant=robot_variant)
        self.q_default = default_joint_q().to(self.torch_device)
        self.kp = torch.full((num_envs, 1), PD_KP, device=self.torch_device)
        """(N, 1) or (N, 12) proportional gains of the position controller [N·m/rad]."""
        self.kd = torch.full((num_envs, 1), PD_KD, device=self.torch_device)
        """(N, 1) or (N, 12) derivative gains of the position controller [N·m·s/rad]."""
        self._torque_scale = torch.tensor(TORQUE_SCALE * 4, device=self.torch_device)

    # ----------------------------------------------------------------------------------------------
    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add the base (free joint), the 12 leg links and joints, and the 9 colliders (module docstring)."""
        cfg = newton.ModelBuilder.ShapeConfig(
            density=0.0, ke=(CONTACT_KE + GROUND_KE) / 2, kd=(CONTACT_KD + GROUND_KD) / 2,
            kf=(CONTACT_KF + GROUND_KF) / 2, mu=(CONTACT_MU + GROUND_MU) / 2,
        )
        base = builder.add_link(xform=wp.transform((0.0, 0.0, START_HEIGHT), wp.quat_identity()), mass=BASE_MASS,
                                com=BASE_COM, inertia=BASE_INERTIA, lock_inertia=True, label="base")
        # Body creation order decides the variant: aligned with the joints, or the URDF's link order.
        body_order = LEGS if self.robot_variant == "physical" else URDF_LEGS
        links: dict[str, list[int]] = {}
        for leg in body_order:
            links[leg] = []
            for link, mass in (("HIP", HIP_MASS), ("THIGH", THIGH_MASS), ("SHANK", SHANK_MASS)):
                com, inertia = LINK_INERTIALS[(link, LEG_SIDE[leg])]
                links[leg].append(builder.add_link(mass=mass, com=com, inertia=inertia, lock_inertia=True,
                                                   label=f"{leg}_{link}"))
        joints = [builder.add_joint_free(base, label="floating_base")]
        for leg in LEGS:
            parent = base
            for j, (pos, quat, sign) in enumerate(JOINT_FRAMES[leg]):
                low, high = HAA_LIMITS[leg] if j == 0 else (-UNLIMITED, UNLIMITED)
                joints.append(builder.add_joint_revolute(
                    parent, links[leg][j], parent_xform=wp.transform(pos, wp.quat(*quat)),
                    axis=(sign, 0.0, 0.0), limit_lower=low, limit_upper=high, limit_ke=JOINT_LIMIT_KE,
                    limit_kd=JOINT_LIMIT_KD, armature=ARMATURE, target_ke=0.0, target_kd=0.0,
                    label=f"{leg}_{JOINTS[j]}",
                ))
                parent = links[leg][j]
        builder.add_articulation(joints, label="anymal")
        # Colliders in the release's shape order; capsule z turned onto body -x so that the +x end comes first.
        along_minus_x = wp.quat_from_axis_angle(wp.vec3(0.0, 1.0, 0.0), -math.pi / 2)
        radius, half = BASE_CAPSULE
        builder.add_shape_capsule(base, xform=wp.transform((0.0, 0.0, 0.0), along_minus_x), radius=radius,
                                  half_height=half, cfg=cfg)
        knee_r, knee_half, knee_centre = KNEE_CAPSULE
        foot_r, (fx, fy, fz) = FOOT_SPHERE
        for leg in URDF_LEGS:
            _, thigh, shank = links[leg]
            builder.add_shape_capsule(thigh, xform=wp.transform(knee_centre, along_minus_x), radius=knee_r,
                                      half_height=knee_half, cfg=cfg)
            foot_y = -fy if leg in ("LF", "RH") else fy
            builder.add_shape_sphere(shank, xform=wp.transform((fx, foot_y, fz), wp.quat_identity()), radius=foot_r,
                                     cfg=cfg)

    # ----------------------------------------------------------------------------------------------
    # control
    def set_pd_gains(self, kp: torch.Tensor | float, kd: torch.Tensor | float) -> None:
        """Gains of the position controller: scalars, (N, 1) per env, or (N, 12) per joint."""
        self.kp, self.kd = self._gains(kp), self._gains(kd)

    def _gains(self, value: torch.Tensor | float) -> torch.Tensor:
        gains = torch.as_tensor(value, dtype=torch.float32, device=self.torch_device)
        return gains.reshape(1, 1).expand(self.num_envs, 1) if gains.dim() == 0 else gains.expand(self.num_envs, -1)

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint torques (N, 12) of the controller (module docstring) from the current (start-of-frame) state."""
        self.torch_after_warp()  # a stream wait on a GPU, not a host synchronisation
        q, qd = self._joint_q[:, 7:], self._joint_qd[:, 6:]
        a = actions.to(self.torch_device).clamp(-1.0, 1.0)
        if self.control_mode == "position":
            return joint_pd_torques(self.q_default + ACTION_SCALE * a, q, qd, self.kp, self.kd)
        return a * self._torque_scale + TORQUE_MODE_KP * (self.q_default - q)

    def randomize_controller(self, generator: torch.Generator, gains: str | None = None) -> None:
        """Data generation: draw one (Kp, Kd) pair per env, uniform in the box ``gains`` of :data:`DATA_PD_GAINS`
        (None: the default, ``release``: Kp ~ U[30, 200], Kd ~ U[0, 1])."""
        (kp_low, kp_high), (kd_low, kd_high) = DATA_PD_GAINS[gains or self.pd_gain_boxes[0]]
        n = self.num_envs
        self.set_pd_gains(uniform(kp_low, kp_high, n, generator), uniform(kd_low, kd_high, n, generator))

    def sample_random_actions(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Actions uniform in [−1, 1]^12 (the release's dataset sampler)."""
        return uniform([-1.0] * NUM_JOINTS, [1.0] * NUM_JOINTS, n, generator).to(self.torch_device)

    def sample_random_torques(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Not a white-noise torque robot: its data goes through the PD law (:meth:`sample_random_actions`)."""
        raise UserError("Anymal generates data through its PD controller (random actions), not random torques")

    # ----------------------------------------------------------------------------------------------
    # distributions
    def default_states(self, n: int) -> torch.Tensor:
        """The default pose at rest: base 0.7 m up, upright, joints :func:`default_joint_q`, (n, 37)."""
        q = torch.zeros(n, 19)
        q[:, 2] = START_HEIGHT
        q[:, 6] = 1.0
        q[:, 7:] = default_joint_q()
        return torch.cat([q, torch.zeros(n, 18)], dim=1).to(self.torch_device)

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release's dataset reset (module docstring), (n, 37), world frame."""
        states = self.default_states(n).cpu()
        q, qd = states[:, :19], states[:, 19:]
        q[:, 0:2] += uniform([-INIT_XY_RANGE] * 2, [INIT_XY_RANGE] * 2, n, generator)
        q[:, 2:3] = uniform(*INIT_HEIGHT_RANGE, n, generator)
        axis = torch.nn.functional.normalize(uniform([-1.0] * 3, [1.0] * 3, n, generator), dim=-1)
        angle = uniform(-INIT_TILT_RANGE, INIT_TILT_RANGE, n, generator).squeeze(1)
        quat = quat_from_axis_angle(axis, angle)
        q[:, 3:7] = quat
        q[:, 7:] += uniform([-INIT_JOINT_RANGE] * NUM_JOINTS, [INIT_JOINT_RANGE] * NUM_JOINTS, n, generator)
        omega = quat_rotate(quat, uniform([-INIT_ANG_VEL_RANGE] * 3, [INIT_ANG_VEL_RANGE] * 3, n, generator))
        v_origin = quat_rotate(quat, uniform([-INIT_LIN_VEL_RANGE] * 3, [INIT_LIN_VEL_RANGE] * 3, n, generator))
        # Newton's free joint carries the COM velocity: v_com = v_origin + ω × (R com_b).
        com = quat_rotate(quat, torch.tensor(BASE_COM).expand(n, 3))
        qd[:, 0:3] = v_origin + torch.cross(omega, com, dim=-1)
        qd[:, 3:6] = omega
        qd[:, 7:] = uniform([-INIT_JOINT_VEL_RANGE] * (NUM_JOINTS - 1), [INIT_JOINT_VEL_RANGE] * (NUM_JOINTS - 1), n,
                            generator)
        return states.to(self.torch_device)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The release's RL reset (module docstring), (n, 37), world frame."""
        states = self.default_states(n).cpu()
        states[:, 7:19] *= uniform([RESET_JOINT_SCALE[0]] * NUM_JOINTS, [RESET_JOINT_SCALE[1]] * NUM_JOINTS, n,
                                   generator)
        states[:, 26:37] = uniform([-RESET_JOINT_VEL_RANGE] * (NUM_JOINTS - 1),
                                   [RESET_JOINT_VEL_RANGE] * (NUM_JOINTS - 1), n, generator)
        return states.to(self.torch_device)
