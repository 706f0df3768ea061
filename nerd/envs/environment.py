"""Base class of the Newton robot environments: N parallel copies of one robot in one Newton model.

A frame is one call of :meth:`Environment.step_with_joint_act`: ``sim_substeps`` solver steps with the
joint torques held constant, then the collision stage (the environment's
:class:`~nerd.envs.contacts.GroundContacts`, a no-op for contact-free robots), so the contact set always
describes the current state and is what the next frame's solver consumes. The simulator's arrays are viewed
as torch tensors of shape (N, ·) that share memory with Warp; getters return copies.

State vector of one env: ``[joint_q (dof_q), joint_qd (dof_qd)]`` in Newton's conventions. For a free
joint, ``joint_q = [p (3) world position of the body origin, quaternion (4) xyzw]`` and
``joint_qd = [v (3) linear velocity of the body's centre of mass in world axes, w (3) angular velocity in
world axes]`` (Newton 1.8: linear first). ``nerd.representation`` builds the robot-centric view on top.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import newton
import numpy as np
import torch
import warp as wp

from nerd.envs.contacts import ContactAugmentation, GroundContacts
from nerd.envs.interop import torch_waits_for_warp, warp_waits_for_torch
from nerd.envs.solvers import MAXIMAL_COORDINATE_SOLVERS, SOLVERS, make_solver
from nerd.errors import RolloutDivergedError, UserError
from nerd.modes import CONTACT_FRICTION, MASS_MATRIX_REFRESH


class Environment:
    """N copies of one robot, stepped together by a Newton solver.

    Subclasses describe one robot: its constants, :meth:`build_robot`, its controller
    (:meth:`compute_torques`) and its distributions: data generation (:meth:`sample_initial_states`,
    :meth:`sample_random_torques`) and the task reset (:meth:`sample_reset_states`). Everything else
    (replication, stepping, graph capture, state access, the fixed-size ground contacts) lives here once.

    Args:
        num_envs: Number of parallel copies N.
        device: Warp/torch device, e.g. ``"cpu"`` or ``"cuda:0"``.
        solver: Ground-truth solver name, one of :data:`SOLVERS`.
        use_graph: Capture the frame step as a Warp graph (CPU and CUDA) and replay it. The uncaptured
            path is kept for debugging and for differentiable use.
        mass_matrix_refresh: One of :data:`MASS_MATRIX_REFRESH`; None keeps the robot's default.
        contact_friction: One of :data:`CONTACT_FRICTION`; None keeps the robot's default.
        robot_variant: One of the robot's :attr:`robot_variants`; None keeps its first. A robot without variants
            refuses one.
    """

    # Every user: the robot, its timing, the frame of its model inputs, its solver and variants.
    name: ClassVar[str] = ""
    frame_dt: ClassVar[float] = 1.0 / 60.0
    """Duration of one frame [s]; one NeRD prediction covers one frame."""
    sim_substeps: ClassVar[int] = 1
    """Solver steps per frame; torques are held constant over them."""
    gravity: ClassVar[float] = -9.81
    """Gravity along world z [m/s^2] (Franka: 0, as in the release)."""
    control_modes: ClassVar[tuple[str, ...]] = ()
    """Controllers a robot offers (its constructor's ``control_mode``); empty for robots with a single one."""
    control_steps: int = 1
    """Frames per policy action in RL tasks (the release's ``control_steps``; Franka's PD control: 2)."""
    states_frame: ClassVar[str] = "world"
    """Frame of the model's state inputs: ``"world"`` or ``"body"`` (robot-centric)."""
    continuous_q_indices: ClassVar[tuple[int, ...]] = ()
    """Joint coordinates (within one env's joint_q) of continuous revolute joints, wrapped into [-pi, pi)."""
    anchor_body: ClassVar[int] = 0
    """Body (within one env) whose pose is the robot-centric anchor: the base, or the first moving link."""
    default_solver: ClassVar[str] = "featherstone"
    mass_matrix_refresh: ClassVar[str] = "frame"
    """Default of :data:`MASS_MATRIX_REFRESH` for this robot (the release's: once per frame)."""
    contact_friction: ClassVar[str] = "coulomb"
    """Default of :data:`CONTACT_FRICTION` for this robot."""
    robot_variants: ClassVar[tuple[str, ...]] = ()
    """Variants of the robot's model that a ``robot_variant`` argument chooses from, default first; empty for a
    robot with one model (then :attr:`robot_variant` is ``""``)."""
    robot_variant: str = ""
    """The variant this env was built as (recorded in datasets' and checkpoints' robot signature)."""
    robot_variants_interchangeable: ClassVar[bool] = False
    """Whether a model or dataset of one variant may meet an environment of another. False (Anymal): the variants
    are different robot models (body order, mass matrix), so a model of the other variant is refused. True
    (CubeToss): the variants are the same robot (same state, same contact candidates) under different physics, so
    a sim-trained model may be fine-tuned on, or evaluated against, "real" data; the signature still records the
    variant each file was made with."""

    # Read by data generation alone (nerd.generation): how random data is drawn.
    random_control: ClassVar[str] = "torques"
    """What data generation draws each frame: ``"torques"`` (:meth:`sample_random_torques`, white noise applied
    directly) or ``"actions"`` (:meth:`sample_random_actions` through the robot's controller, after
    :meth:`randomize_controller`; both the actions and the resulting torques are recorded)."""
    pd_gain_boxes: ClassVar[tuple[str, ...]] = ()
    """Names of the data-generation gain boxes :meth:`randomize_controller` accepts, the default first (empty for
    robots whose data bypasses a controller)."""
    ground_plane_rules: ClassVar[tuple[str, ...]] = ()
    """Robots whose data is generated on a random ground plane per trajectory (the pendulum): the names of the rules
    their ``sample_ground_planes`` draws by (the release's alone today; empty: no random planes)."""

    # Read by the model features alone (nerd.features), our options: what a model may read beyond the release's inputs.
    joint_limits: ClassVar[tuple[tuple[int, float, float], ...]] = ()
    """``(joint_q index, lower, upper)`` of the joint limits a model trained with ``joint_limit_inputs`` (our option)
    reads, as built into the robot (a test checks them against the model); empty: the option is refused."""
    mirror_joint_signs: ClassVar[tuple[float, ...]] = ()
    """A reflection that maps the robot's dynamics onto themselves (our option ``mirror``): the sign (+1 or -1) of
    each joint DoF's coordinate, rate and torque under it, for fixed-base world-frame robots without contacts;
    empty: the robot declares none (``mirror`` is refused). A test checks it against the ground truth."""

    hinge_labels: ClassVar[tuple[str, ...]] = ()
    """Names of the non-free joint DoFs in order, all hinges, for a robot whose hinges Newton merges into joints of
    several DoFs (the Humanoid's MJCF import); empty: each joint's own label names its DoF."""

    # Read by passive evaluation alone (nerd.evaluation).
    passive_metrics: ClassVar[dict[str, tuple[str, tuple[int, ...]]]] = {}
    """Passive-motion metrics: name -> (kind, joint_q indices). Kinds: ``"abs"`` mean |dq| over the
    indices (wrapped for continuous joints), ``"position"`` base position distance, ``"orientation"`` base
    rotation angle, ``"end_effector"`` distance between the :meth:`end_effector_position` of the two states."""

    def __init__(self, num_envs: int, device: str = "cpu", solver: str | None = None, use_graph: bool = True,
                 mass_matrix_refresh: str | None = None, contact_friction: str | None = None,
                 robot_variant: str | None = None):
        if num_envs < 1:
            raise UserError(f"num_envs must be at least 1, got {num_envs}")
        solver = solver or self.default_solver
        if solver not in SOLVERS:
            raise UserError(f"unknown solver '{solver}'; valid solvers: {', '.join(SOLVERS)}")
        mass_matrix_refresh = mass_matrix_refresh or type(self).mass_matrix_refresh
        if mass_matrix_refresh not in MASS_MATRIX_REFRESH:
            raise UserError(f"unknown mass-matrix refresh '{mass_matrix_refresh}'; "
                            f"valid: {', '.join(MASS_MATRIX_REFRESH)}")
        self.mass_matrix_refresh = mass_matrix_refresh
        contact_friction = contact_friction or type(self).contact_friction
        if contact_friction not in CONTACT_FRICTION:
            raise UserError(f"unknown contact friction '{contact_friction}'; valid: {', '.join(CONTACT_FRICTION)}")
        self.contact_friction = contact_friction
        if self.robot_variants:
            robot_variant = robot_variant or self.robot_variants[0]
            if robot_variant not in self.robot_variants:
                raise UserError(f"unknown {self.name} variant '{robot_variant}'; "
                                f"valid variants: {', '.join(self.robot_variants)}")
            self.robot_variant = robot_variant
        elif robot_variant:
            raise UserError(f"{self.name} has a single variant; it takes no robot_variant ('{robot_variant}')")
        self.num_envs = num_envs
        self.device = wp.get_device(device)
        self.torch_device = wp.device_to_torch(self.device)
        self.solver_name = solver
        self.use_graph = use_graph
        self.sim_dt = self.frame_dt / self.sim_substeps

        self.model = self.build_model()
        self.bodies_per_env = self.model.body_count // num_envs
        self.shapes_per_env = self.model.shape_count // num_envs
        try:
            self.solver = make_solver(solver, self.model, self.sim_substeps, mass_matrix_refresh)
        except ImportError as err:
            # An optional backend (MuJoCo Warp) that this project does not install: a choice, not a bug.
            raise UserError(f"solver '{solver}' is not available in this install ({err}); use 'featherstone'") from err

        self.state_0 = self.model.state()
        self.state_1 = self.model.state()
        self.control = self.model.control()
        self._graph = None

        self.dof_q = self.model.joint_coord_count // num_envs
        self.dof_qd = self.model.joint_dof_count // num_envs
        joint_type = self.model.joint_type.numpy()[: len(self.model.joint_type) // num_envs]
        self.floating_base = bool(np.any(joint_type == newton.JointType.FREE))
        # Joint torques are exchanged for the non-free DoFs only (a free joint has no actuator).
        self.act_dof_indices = list(range(6, self.dof_qd)) if self.floating_base else list(range(self.dof_qd))
        self.act_dim = len(self.act_dof_indices)
        # A slice (the actuated DoFs are contiguous): the per-step write is a view, no index tensor per step. Empty
        # for a robot without actuators (CubeToss).
        self._act_columns = slice(6 if self.floating_base else 0, self.dof_qd)

        self._joint_q = wp.to_torch(self.state_0.joint_q).view(num_envs, self.dof_q)
        self._joint_qd = wp.to_torch(self.state_0.joint_qd).view(num_envs, self.dof_qd)
        self._joint_f = wp.to_torch(self.control.joint_f).view(num_envs, self.dof_qd)
        self._body_q = wp.to_torch(self.state_0.body_q).view(num_envs, self.bodies_per_env, 7)
        self.joint_acts = torch.zeros(num_envs, self.act_dim, device=self.torch_device)
        """Torques applied in the last frame, (N, act_dim) [N·m or N]."""
        self.ground = GroundContacts(self.model, num_envs, self.bodies_per_env, self.shapes_per_env)
        """The fixed-size ground contacts: each env's ground plane and the solver's contact set."""
        self.contact_augmentation: ContactAugmentation | None = None
        """Extra contact forces inside every substep of the ground truth (a hybrid simulator,
        :class:`nerd.hybrid.ContactForceAugmentation`); set it before the first frame (a GPU graph captures it)."""
        newton.eval_fk(self.model, self.state_0.joint_q, self.state_0.joint_qd, self.state_0)
        self.refresh_contacts()

    # ----------------------------------------------------------------------------------------------
    # robot description: implemented once per robot module
    def build_model(self, requires_grad: bool = False) -> newton.Model:
        """The Newton model of ``num_envs`` copies of the robot, on the env's device; with ``requires_grad`` one whose
        arrays record gradients (the differentiable rollouts of :mod:`nerd.diffsim`)."""
        robot = newton.ModelBuilder(up_axis=newton.Axis.Z, gravity=(0.0, 0.0, self.gravity))
        self.build_robot(robot)
        builder = newton.ModelBuilder(up_axis=newton.Axis.Z, gravity=(0.0, 0.0, self.gravity))
        # Separate worlds: copies never collide with each other.
        builder.replicate(robot, self.num_envs)
        return builder.finalize(device=self.device, requires_grad=requires_grad)

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add one copy of the robot (bodies, joints, shapes, articulation) to ``builder``."""
        raise NotImplementedError

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Controller: map policy actions (N, action_dim) to joint torques (N, act_dim)."""
        raise NotImplementedError

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Initial states (n, dof_q + dof_qd), world frame, for data generation (the release's ranges)."""
        raise NotImplementedError

    random_torque_box: ClassVar[tuple[float, ...]] = ()
    """Half-widths [N or N·m] of the white-noise torque box of data generation, one per joint torque;
    empty for robots whose data does not draw random torques."""

    def sample_random_torques(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """White-noise joint torques (n, act_dim) for data generation: uniform in ±:attr:`random_torque_box`."""
        if len(self.random_torque_box) != self.act_dim:
            raise NotImplementedError(f"{self.name} has no white-noise torque box for its {self.act_dim} torques")
        box = self.random_torque_box
        return uniform([-s for s in box], box, n, generator).to(self.torch_device)

    def sample_random_actions(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Random policy actions (n, action_dim) for data generation of ``random_control = "actions"`` robots."""
        raise NotImplementedError

    def randomize_controller(self, generator: torch.Generator, gains: str | None = None) -> None:
        """Data generation: draw the controller's random parameters (e.g. PD gains, from the box ``gains``, one of
        :attr:`pd_gain_boxes`; None for the robot's default, the first) for the next frame."""

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The robot's random reset (RL episodes, and passive evaluation as the release's starts from its env's
        reset): (n, dof_q + dof_qd), world.

        The one home of a robot's reset distribution: the RL tasks and ``--initial-states task`` both call it.
        Defaults to the data-generation sampler (CubeToss, whose release env resets that way); robots whose env
        resets differently override it.
        """
        return self.sample_initial_states(n, generator)

    def sample_limit_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Initial states (n, dof_q + dof_qd), world, near a joint limit and moving slowly into it
        (``--initial-states limits``): data for the bounces off the limit's stiff spring, which the other
        distributions rarely hold. Only robots whose accuracy hinges on such bounces implement it (Cartpole)."""
        raise UserError(f"{self.name} has no near-limit initial states (--initial-states limits: Cartpole only)")

    def end_effector_position(self, states: torch.Tensor) -> torch.Tensor:
        """World position (..., 3) [m] of the robot's end effector in states (..., dof_q + dof_qd), by forward
        kinematics; only robots with an end effector (Franka) implement it."""
        raise UserError(f"{self.name} has no end effector")

    @property
    def action_dim(self) -> int:
        """Width of the action vector taken by :meth:`step`."""
        return self.act_dim

    # ----------------------------------------------------------------------------------------------
    # state access
    @property
    def state_dim(self) -> int:
        """Width of one env's state vector, dof_q + dof_qd."""
        return self.dof_q + self.dof_qd

    def state_names(self) -> list[str]:
        """Name and unit of every state coordinate, ``[joint_q..., joint_qd...]``, e.g. ``"pole_hinge q [rad]"``.

        A free joint's coordinates are ``x y z [m]``, ``qx qy qz qw`` (quaternion, unitless), linear velocity
        ``vx vy vz [m/s]`` and angular velocity ``wx wy wz [rad/s]``; hinges are [rad], [rad/s], sliders [m], [m/s].
        """
        q_names, qd_names, _ = self._coordinate_names()
        return q_names + qd_names

    def joint_act_names(self) -> list[str]:
        """Name and unit of every joint torque (:attr:`joint_acts` columns), e.g. ``"slider [N]"``."""
        return [self._coordinate_names()[2][i] for i in self.act_dof_indices]

    def _coordinate_names(self) -> tuple[list[str], list[str], list[str]]:
        """Names of joint_q, joint_qd and joint_f entries of one env (indices if a joint type is not covered)."""
        q_names, qd_names, f_names = [], [], []
        joints = self.model.joint_count // self.num_envs
        labels, types = self.model.joint_label[:joints], self.model.joint_type.numpy()[:joints]
        dofs = np.diff(self.model.joint_qd_start.numpy()[: joints + 1])
        hinges = iter(self.hinge_labels)
        for label, joint_type, count in zip(labels, types, dofs, strict=True):
            label = label.rsplit("/", 1)[-1]
            if joint_type == newton.JointType.FREE:
                q_names += [f"{label} {c} [m]" for c in "xyz"] + [f"{label} q{c}" for c in "xyzw"]
                qd_names += [f"{label} v{c} [m/s]" for c in "xyz"] + [f"{label} w{c} [rad/s]" for c in "xyz"]
                f_names += [f"{label} f{c} [N]" for c in "xyz"] + [f"{label} t{c} [N·m]" for c in "xyz"]
            elif self.hinge_labels:
                for name in (next(hinges, f"hinge{len(q_names)}") for _ in range(count)):
                    q_names.append(f"{name} q [rad]")
                    qd_names.append(f"{name} qd [rad/s]")
                    f_names.append(f"{name} [N·m]")
            elif joint_type == newton.JointType.PRISMATIC:
                q_names.append(f"{label} q [m]")
                qd_names.append(f"{label} qd [m/s]")
                f_names.append(f"{label} [N]")
            elif joint_type == newton.JointType.REVOLUTE:
                q_names.append(f"{label} q [rad]")
                qd_names.append(f"{label} qd [rad/s]")
                f_names.append(f"{label} [N·m]")
        if len(q_names) != self.dof_q or len(qd_names) != self.dof_qd:
            # A joint type not named above: indices rather than wrong labels.
            q_names = [f"q[{i}]" for i in range(self.dof_q)]
            qd_names = [f"qd[{i}]" for i in range(self.dof_qd)]
            f_names = [f"f[{i}]" for i in range(self.dof_qd)]
        return q_names, qd_names, f_names

    def get_states(self) -> torch.Tensor:
        """Copy of the current states, (N, dof_q + dof_qd), world frame."""
        self.torch_after_warp()
        return torch.cat([self._joint_q, self._joint_qd], dim=1).clone()

    def set_states(self, states: torch.Tensor, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Overwrite the states of ``env_ids`` (all envs if None) and update body poses.

        Args:
            states: (len(env_ids), dof_q + dof_qd) joint coordinates and velocities, world frame.
            env_ids: Indices of the envs to overwrite.
        """
        rows = slice(None) if env_ids is None else torch.as_tensor(env_ids, device=self.torch_device)
        expected = self.num_envs if env_ids is None else len(rows)
        if states.shape != (expected, self.state_dim):
            raise ValueError(
                f"{self.name}: states must have shape ({expected}, {self.state_dim}), got {tuple(states.shape)}"
            )
        states = states.to(self.torch_device, torch.float32)
        if not bool(torch.isfinite(states).all()):
            raise UserError(f"{self.name}: states contain NaN or inf (rows "
                            f"{(~torch.isfinite(states).all(dim=1)).nonzero().flatten().tolist()[:5]})")
        self._joint_q[rows] = states[:, : self.dof_q]
        self._joint_qd[rows] = states[:, self.dof_q :]
        self.sync_torch_writes()
        newton.eval_fk(self.model, self.state_0.joint_q, self.state_0.joint_qd, self.state_0)
        self.refresh_contacts()

    def get_root_body_q(self) -> torch.Tensor:
        """Pose [p, quat xyzw] of each env's anchor body, (N, 7), world frame."""
        self.torch_after_warp()
        return self._body_q[:, self.anchor_body].clone()

    def get_body_q(self) -> torch.Tensor:
        """Poses [p, quat xyzw] of all bodies, (N, bodies_per_env, 7), world frame (what a viewer draws)."""
        self.torch_after_warp()
        return self._body_q.clone()

    def get_ground_planes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(normals (N, 3), points (N, 3)) of each env's ground plane, world frame."""
        return self.ground.planes()

    def reset(self, env_ids: Sequence[int] | torch.Tensor | None = None, states: torch.Tensor | None = None,
              generator: torch.Generator | None = None) -> None:
        """Reset ``env_ids`` (all if None) to ``states``, or to the robot's random reset states when none are given.

        Without a ``generator`` the random states come from seed 0 every call; pass one for fresh draws.
        """
        n = self.num_envs if env_ids is None else len(env_ids)
        if states is None:
            states = self.sample_reset_states(n, generator or torch.Generator().manual_seed(0))
        self.set_states(states, env_ids)
        rows = slice(None) if env_ids is None else torch.as_tensor(env_ids, device=self.torch_device)
        self.joint_acts[rows] = 0.0

    # ----------------------------------------------------------------------------------------------
    # contacts
    @property
    def contact_count(self) -> int:
        """Contact candidates C per env (0 for a robot without collision shapes)."""
        return self.ground.count

    @property
    def contacts(self) -> newton.Contacts | None:
        """The Newton contact set the solver consumes (N * C ground contacts), or None without candidates."""
        return self.ground.contacts

    def set_ground_planes(self, normals: torch.Tensor, points: torch.Tensor,
                          env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Set the ground plane of each env (all if ``env_ids`` is None) and re-detect the contacts.

        Args:
            normals: (n, 3) or (3,) unit plane normals, world frame; contacts push along the normal.
            points: (n, 3) or (3,) a point on each plane [m], world frame.
        """
        self.ground.set_planes(normals, points, env_ids)
        self.sync_torch_writes()
        self.refresh_contacts()

    def set_model_values(self, values: Mapping[str, torch.Tensor]) -> None:
        """Give every robot copy the same values of the named ``newton.Model`` arrays, each given as one copy's
        values (e.g. the contact material that a system identification found, :mod:`nerd.sysid`).

        Only arrays the step reads as it runs (shape materials, joint damping, armature, joint poses): body masses,
        inertias and centres of mass are baked into the solver when it is built, so they are refused.
        """
        for name, value in values.items():
            array = getattr(self.model, name, None)
            if not isinstance(array, wp.array) or name.startswith("body_"):
                raise UserError(f"{self.name}: '{name}' is not a model array set_model_values can change")
            full = wp.to_torch(array)
            one = (full.shape[0] // self.num_envs, *full.shape[1:])
            value = torch.as_tensor(value, dtype=full.dtype, device=full.device)
            if tuple(value.shape) != one:
                raise UserError(f"{self.name}: '{name}' takes one copy's values of shape {one}, got "
                                f"{tuple(value.shape)}")
            full.copy_(value.expand(self.num_envs, *one).reshape(full.shape))
        self.sync_torch_writes()

    def get_contacts(self) -> dict[str, torch.Tensor]:
        """Contact features of the current state, world frame (see :func:`~nerd.envs.contacts.contact_features`).

        Returns:
            ``contact_normals`` (N, C, 3), ``contact_points_0`` (N, C, 3) candidate points [m],
            ``contact_points_1`` (N, C, 3) closest ground points [m], ``contact_depths`` (N, C) [m],
            ``contact_thicknesses`` (N, C) [m].
        """
        self.torch_after_warp()
        return self.ground.features(self.state_0.body_q)

    # ----------------------------------------------------------------------------------------------
    # stepping
    def step(self, actions: torch.Tensor) -> None:
        """Advance one frame with policy actions (N, action_dim) through the robot's controller."""
        self.check_actions(actions)
        self.step_with_joint_act(self.compute_torques(actions))

    def check_actions(self, actions: torch.Tensor) -> None:
        """Raise a one-line ValueError unless ``actions`` is (N, action_dim) (NaN is caught on the torques)."""
        if actions.shape != (self.num_envs, self.action_dim):
            raise UserError(f"{self.name}: actions must have shape ({self.num_envs}, {self.action_dim}), "
                             f"got {tuple(actions.shape)}")

    def step_with_joint_act(self, joint_acts: torch.Tensor, check_finite: bool = True) -> None:
        """Advance one frame with joint torques (N, act_dim) held constant over the substeps.

        ``check_finite`` refuses non-finite torques and raises if the frame leaves a non-finite state (finite but
        enormous torques can do that); off, both are the caller's to check (data generation drops such
        trajectories).
        """
        self.apply_joint_act(joint_acts, check_finite)
        self.simulate_frame()
        if check_finite:
            self.check_states_finite()

    def check_states_finite(self) -> None:
        """Raise :class:`~nerd.errors.RolloutDivergedError` naming the envs whose state is not finite."""
        self.torch_after_warp()
        bad = ~torch.isfinite(torch.cat([self._joint_q, self._joint_qd], dim=1)).all(dim=1)
        if bool(bad.any()):
            envs = bad.nonzero().flatten().tolist()
            raise RolloutDivergedError(f"{self.name}: the ground truth produced non-finite states in env(s) "
                                       f"{envs[:5]}{' ...' if len(envs) > 5 else ''} (torques too large for the "
                                       "solver?)")

    def apply_joint_act(self, joint_acts: torch.Tensor, check_finite: bool = True) -> None:
        """Set the joint torques (N, act_dim) [N·m or N] of the next frame in the solver's control.

        ``check_finite=False`` skips the NaN/inf check (a host synchronisation) for a caller that checks the
        torques itself in the same synchronisation as other values (the NeRD integrator).
        """
        if joint_acts.shape != (self.num_envs, self.act_dim):
            raise ValueError(
                f"{self.name}: joint torques must have shape ({self.num_envs}, {self.act_dim}), "
                f"got {tuple(joint_acts.shape)}"
            )
        if check_finite and not bool(torch.isfinite(joint_acts).all()):
            # Reject here, the one place both modes pass through: the solver would silently return NaN states.
            raise UserError(f"{self.name}: joint torques (or the actions they come from) contain NaN or inf")
        self.joint_acts.copy_(joint_acts)
        self._joint_f[:, self._act_columns] = self.joint_acts
        self.sync_torch_writes()

    def simulate_frame(self) -> None:
        """Run one ground-truth frame with the torques already applied (replaying the captured graph)."""
        if not self.use_graph:
            self._simulate_frame()
            return
        if self._graph is None:
            # This frame runs uncaptured (loading every kernel module), then the next ones replay its capture.
            self._simulate_frame()
            with wp.ScopedCapture(device=self.device) as capture:
                self._simulate_frame()
            self._graph = capture.graph
        else:
            wp.capture_launch(self._graph)

    def refresh_contacts(self) -> None:
        """Re-run the collision stage for the current state (after a state was written from outside)."""
        self.ground.detect(self.state_0.body_q)

    def substep(self, model: newton.Model, solver, src: newton.State, dst: newton.State, control: newton.Control,
                contacts: newton.Contacts | None, augmentation: ContactAugmentation | None = None,
                weights: Sequence[wp.array] | None = None) -> None:
        """One ground-truth substep of ``model`` (this robot's, or its differentiable rebuild) from ``src`` to
        ``dst``: the contact augmentation's forces (with ``weights``, see :class:`ContactAugmentation`) and, under
        the Huber law, the contact wrenches go into ``src.body_f`` (Featherstone copies it into its external
        forces); the solver gets the contact set only under Newton's own law."""
        if augmentation is not None:
            augmentation.apply_forces(model, src, contacts, weights)
        huber = self.contact_friction == "huber" and contacts is not None
        if huber:
            self.ground.apply_huber_forces(model, src, contacts)
        solver.step(src, dst, control, None if huber else contacts, self.sim_dt)

    def _simulate_frame(self) -> None:
        states = (self.state_0, self.state_1)
        for i in range(self.sim_substeps):
            src, dst = states[i % 2], states[(i + 1) % 2]
            src.clear_forces()
            self.substep(self.model, self.solver, src, dst, self.control, self.contacts, self.contact_augmentation)
        # state_0 always holds the current state, so the captured graph can be replayed as is.
        if self.sim_substeps % 2 == 1:
            self.state_0.assign(self.state_1)
        if self.solver_name in MAXIMAL_COORDINATE_SOLVERS:
            newton.eval_ik(self.model, self.state_0, self.state_0.joint_q, self.state_0.joint_qd)
        self.refresh_contacts()

    def synchronize(self) -> None:
        """Block the host until pending Warp work is done (for timing; reads need only :meth:`torch_after_warp`)."""
        if self.device.is_cuda:
            wp.synchronize_device(self.device)

    def torch_after_warp(self) -> None:
        """Order torch's next work after the Warp launches so far, so torch views of the simulation arrays read
        current values; on a GPU a device-side stream wait, never a host synchronisation (a no-op on the CPU)."""
        torch_waits_for_warp(self.device)

    def sync_torch_writes(self) -> None:
        """Make torch's writes to shared arrays visible to the next Warp launch: a device-side stream wait on a
        GPU (a no-op on the CPU)."""
        warp_waits_for_torch(self.device)


def uniform(low: Sequence[float] | float, high: Sequence[float] | float, n: int, generator: torch.Generator
            ) -> torch.Tensor:
    """Samples (n, len(low)) uniformly in [low, high] on the CPU, so a seed gives the same data on every device."""
    low_t = torch.as_tensor(low, dtype=torch.float32).reshape(1, -1)
    high_t = torch.as_tensor(high, dtype=torch.float32).reshape(1, -1)
    return low_t + (high_t - low_t) * torch.rand(n, low_t.shape[1], generator=generator)
