"""Model inputs and targets from raw simulator quantities: the one place both training and inference build them.

A NeRD token of step t concatenates, in the robot-centric frame of that step's anchor:
``states`` (dof_q + dof_qd), contact ``contact_normals`` (3C), ground points ``contact_points_1`` (3C),
``contact_depths`` (C), the applied ``joint_acts`` (J) and, for robots in the body frame, the gravity
direction ``gravity_dir`` (3). Features of inactive contact candidates are zeroed after the transform.
Groups that would be empty (no contacts; no torques for a passive robot such as CubeToss) are left out, which
reproduces the release's token widths (Cartpole 6, Pendulum 37, Ant 215).

Our option ``joint_limit_inputs`` appends a ``joint_limits`` group (2L): for each of L limited joint coordinates,
its penetration beyond the limit (signed, 0 inside the range) and its rate while beyond it (0 inside). It is the
joint-space analogue of the contact depth: the limit's spring-damper force, ``-ke * penetration - kd * rate``, is
linear in these two inputs, where the state alone makes it a kink the network has to carve out of ``q``.
Our option ``joint_limit_lookahead`` (with it) appends a ``joint_limit_lookahead`` group (2L): the same two
quantities one frame ahead, for ``q + q̇ Δt`` (Δt the frame's duration). It gives the frame that enters a limit its
cue: the step starts inside the range, where the penetration is still zero, and ends beyond it.

Model options of the paper's ablation study (recorded in the signature, so a checkpoint states them):
``input_frame`` ``"robot"`` (NeRD's robot-centric frame) or ``"world"`` (states and contacts as the world sees them,
no gravity group: it would be constant); ``contact_inputs`` False leaves the contact groups out (with the world
frame: the paper's end-to-end baseline, "E2E"); ``prediction`` ``"relative"`` (the state change) or ``"absolute"``
(the next state itself, in the frame of the inputs). :func:`build_targets` and :func:`apply_targets` are the one
place both training and inference turn a prediction into a state, so the two cannot disagree.

Pure torch, engine-free: the same code runs on dataset batches and on live simulator tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor

from nerd.errors import UserError
from nerd.representation import (
    StateLayout,
    anchor_pose,
    compute_absolute_target,
    compute_target,
    contacts_to_anchor_frame,
    gravity_to_anchor_frame,
    integrate_absolute_target,
    integrate_target,
    states_to_anchor_frame,
    target_dim,
)

ACTIVE_DEPTH_FLOOR = 0.12
"""[m] A candidate is active when depth < max(ACTIVE_THICKNESS_FACTOR * thickness, ACTIVE_DEPTH_FLOOR)."""
ACTIVE_THICKNESS_FACTOR = 4.0
JOINT_LIMITS = "joint_limits"
"""Name of the joint-limit input group (our option ``joint_limit_inputs``)."""
JOINT_LIMIT_LOOKAHEAD = "joint_limit_lookahead"
"""Name of the look-ahead joint-limit input group (our option ``joint_limit_lookahead``)."""
INPUT_FRAMES = ("robot", "world")
"""Values of the ``input_frame`` model option: NeRD's robot-centric frame, or the world frame (ablation)."""
PREDICTIONS = ("relative", "absolute")
"""Values of the ``prediction`` model option: NeRD's state change, or the next state itself (ablation)."""
MODEL_OPTIONS = ("input_frame", "contact_inputs", "prediction")
"""Signature fields that are a model's choice (``model.*`` config keys), not the robot's; defaults are NeRD's."""


@dataclass(frozen=True)
class RobotSignature:
    """Everything a trained model assumes about its robot; checked when a checkpoint is loaded."""

    env_name: str
    dof_q: int
    dof_qd: int
    floating_base: bool
    continuous_q_indices: tuple[int, ...]
    states_frame: str
    contact_count: int
    joint_act_dim: int
    robot_variant: str = ""
    """The robot model's variant (``Anymal``: ``physical`` or ``release``); empty for robots with one model."""
    joint_limits: tuple[tuple[int, float, float], ...] = ()
    """``(joint_q index, lower, upper)`` of the joint limits whose penetration the model reads (the ``joint_limits``
    input group, our option ``joint_limit_inputs``); empty for the release's inputs."""
    joint_limit_lookahead: float = 0.0
    """[s] How far ahead the ``joint_limit_lookahead`` group (our option) looks: the frame's duration, since a
    model predicts one frame; 0 for no such group. Only with :attr:`joint_limits`."""

    input_frame: str = "robot"
    """Frame of the model's state and contact inputs and of its target (model option, :data:`INPUT_FRAMES`):
    ``"robot"`` the robot's own :attr:`states_frame` (NeRD), ``"world"`` the world frame (ablation)."""
    contact_inputs: bool = True
    """Whether the token holds the contact groups (model option; False for the paper's E2E baseline)."""
    prediction: str = "relative"
    """What the model predicts (model option, :data:`PREDICTIONS`): the state change (NeRD) or the next state."""

    def __post_init__(self) -> None:
        if self.joint_limit_lookahead and not self.joint_limits:
            raise UserError("joint_limit_lookahead needs joint_limit_inputs: it looks ahead at the same limits")
        if self.input_frame not in INPUT_FRAMES:
            raise UserError(f"input_frame must be one of {list(INPUT_FRAMES)}, got {self.input_frame!r}")
        if self.prediction not in PREDICTIONS:
            raise UserError(f"prediction must be one of {list(PREDICTIONS)}, got {self.prediction!r}")

    @property
    def model_frame(self) -> str:
        """The frame the model sees and predicts in: ``"world"`` under the world-frame option, else
        :attr:`states_frame` (a robot kept in the world frame is unchanged by the option)."""
        return "world" if self.input_frame == "world" else self.states_frame

    @property
    def layout(self) -> StateLayout:
        """The state layout of this robot, in the frame the model sees (:attr:`model_frame`)."""
        return StateLayout(self.dof_q, self.dof_qd, self.floating_base, list(self.continuous_q_indices),
                           self.model_frame)

    @property
    def model_options(self) -> dict[str, Any]:
        """The model options (:data:`MODEL_OPTIONS`) of this signature."""
        return {key: getattr(self, key) for key in MODEL_OPTIONS}

    @property
    def input_groups(self) -> dict[str, int]:
        """Token groups and widths, in token order."""
        c = self.contact_count
        groups = {"states": self.dof_q + self.dof_qd}
        if c and self.contact_inputs:
            groups.update(contact_normals=3 * c, contact_points_1=3 * c, contact_depths=c)
        if self.joint_act_dim:
            groups["joint_acts"] = self.joint_act_dim
        if self.model_frame == "body":
            groups["gravity_dir"] = 3
        if self.joint_limits:
            groups[JOINT_LIMITS] = 2 * len(self.joint_limits)
        if self.joint_limit_lookahead:
            groups[JOINT_LIMIT_LOOKAHEAD] = 2 * len(self.joint_limits)
        return groups

    @property
    def target_dim(self) -> int:
        """Width of the relative prediction target."""
        return target_dim(self.layout)

    def to_dict(self) -> dict[str, Any]:
        """Plain-type form for checkpoints."""
        d = asdict(self)
        d["continuous_q_indices"] = list(self.continuous_q_indices)
        # Left out when empty: datasets' attributes and the release-input checkpoints stay as they were.
        limits = d.pop("joint_limits")
        if limits:
            d["joint_limits"] = [list(limit) for limit in limits]
        if not d["joint_limit_lookahead"]:
            del d["joint_limit_lookahead"]
        # The model options likewise: NeRD's own (the defaults) leave existing checkpoints' signatures as they were.
        for key, default in _MODEL_OPTION_DEFAULTS.items():
            if d[key] == default:
                del d[key]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RobotSignature:
        """Inverse of :meth:`to_dict`; also accepts a dataset's attributes (extra keys ignored)."""
        return cls(
            env_name=str(d["env_name"]), dof_q=int(d["dof_q"]), dof_qd=int(d["dof_qd"]),
            floating_base=bool(d["floating_base"]), continuous_q_indices=tuple(d["continuous_q_indices"]),
            states_frame=str(d["states_frame"]), contact_count=int(d["contact_count"]),
            joint_act_dim=int(d["joint_act_dim"]),
            # Files written before variants existed hold robots with a single model.
            robot_variant=str(d.get("robot_variant", "")),
            # Datasets never hold it (it is a model's choice); checkpoints written before it existed read none.
            joint_limits=tuple((int(i), float(lo), float(hi)) for i, lo, hi in d.get("joint_limits", ())),
            joint_limit_lookahead=float(d.get("joint_limit_lookahead", 0.0)),
            # Datasets never hold them either; checkpoints of NeRD's own inputs and target leave them out.
            input_frame=str(d.get("input_frame", _MODEL_OPTION_DEFAULTS["input_frame"])),
            contact_inputs=bool(d.get("contact_inputs", _MODEL_OPTION_DEFAULTS["contact_inputs"])),
            prediction=str(d.get("prediction", _MODEL_OPTION_DEFAULTS["prediction"])),
        )

    def check_compatible(self, other: RobotSignature, what: str = "checkpoint") -> None:
        """Raise a one-line ValueError if ``other`` (e.g. the environment) differs from this signature."""
        if other == self:
            return
        options = [f"model.{k} {v!r} (not {getattr(other, k)!r})" for k, v in self.model_options.items()
                   if getattr(other, k) != v]
        if options and replace(other, **self.model_options) == self:
            raise UserError(f"the {what} was trained with {', '.join(options)}; a model's inputs and target are fixed "
                            "when it is trained: use the configuration it was trained with, or train a new model")
        if other.env_name != self.env_name:
            raise UserError(f"the {what} is for robot {self.env_name}, not {other.env_name}")
        if other.robot_variant != self.robot_variant and _variants_interchangeable(self.env_name):
            # The same robot under other physics (CubeToss "sim" / "real"): only the layout has to match.
            if replace(other, robot_variant=self.robot_variant) == self:
                return
        elif other.robot_variant != self.robot_variant:
            raise UserError(f"the {what} is for the {self.env_name} variant '{self.robot_variant}', but the "
                            f"environment is the '{other.robot_variant}' variant (choose it with --robot-variant)")
        diffs = [f"{k} {v} vs {getattr(other, k)}" for k, v in asdict(self).items() if getattr(other, k) != v]
        raise UserError(f"the {what}'s state/contact layout does not match the environment: {', '.join(diffs)}")


_MODEL_OPTION_DEFAULTS = {f.name: f.default for f in fields(RobotSignature) if f.name in MODEL_OPTIONS}
"""NeRD's own model options (the fields' defaults): what a signature without them (a dataset's, an older
checkpoint's) means."""


def with_model_options(sig: RobotSignature, model_cfg: Any) -> RobotSignature:
    """``sig`` with the model options (:data:`MODEL_OPTIONS`) of ``model_cfg`` (a
    :class:`~nerd.models.ModelConfig`, or anything with those attributes): the signature of that model."""
    return replace(sig, **{key: getattr(model_cfg, key) for key in MODEL_OPTIONS})


def _variants_interchangeable(env_name: str) -> bool:
    """The robot's :attr:`~nerd.envs.environment.Environment.robot_variants_interchangeable` (False if unknown)."""
    # Imported here, when two variants actually meet, so that this module stays engine-free.
    from nerd.envs import env_class

    try:
        return env_class(env_name).robot_variants_interchangeable
    except UserError:
        return False


def signature_of_env(env, joint_limit_inputs: bool = False, joint_limit_lookahead: bool = False) -> RobotSignature:
    """Signature of a live :class:`~nerd.envs.Environment`; with ``joint_limit_inputs``, of a model that reads the
    robot's :attr:`~nerd.envs.Environment.joint_limits`, with ``joint_limit_lookahead`` also one frame ahead."""
    return RobotSignature(
        env_name=env.name, dof_q=env.dof_q, dof_qd=env.dof_qd, floating_base=env.floating_base,
        continuous_q_indices=tuple(env.continuous_q_indices), states_frame=env.states_frame,
        contact_count=env.contact_count, joint_act_dim=env.act_dim, robot_variant=env.robot_variant,
        joint_limits=robot_joint_limits(env.name) if joint_limit_inputs else (),
        joint_limit_lookahead=env.frame_dt if joint_limit_lookahead else 0.0,
    )


def check_checkpoint_for_env(signature: RobotSignature, env) -> None:
    """Raise a one-line UserError unless a checkpoint of ``signature`` can step ``env``: its model options (inputs
    and target, fixed when it was trained) are its own, the robot and its layout must be the environment's."""
    env_sig = signature_of_env(env, joint_limit_inputs=bool(signature.joint_limits),
                               joint_limit_lookahead=bool(signature.joint_limit_lookahead))
    signature.check_compatible(replace(env_sig, **signature.model_options))


def robot_joint_limits(env_name: str) -> tuple[tuple[int, float, float], ...]:
    """The limits a ``joint_limit_inputs`` model of ``env_name`` reads; a UserError if the robot declares none."""
    from nerd.envs import env_class  # here, not at the top: this module stays engine-free

    limits = env_class(env_name).joint_limits
    if not limits:
        raise UserError(f"joint_limit_inputs: {env_name} declares no joint limits for the model to read "
                        "(Environment.joint_limits)")
    return tuple(limits)


def robot_mirror_signs(env_name: str) -> tuple[float, ...]:
    """The reflection ``env_name`` declares (:attr:`~nerd.envs.Environment.mirror_joint_signs`, one sign per joint
    DoF); a UserError if it declares none."""
    from nerd.envs import env_class  # here, not at the top: this module stays engine-free

    signs = env_class(env_name).mirror_joint_signs
    if not signs:
        raise UserError(f"mirror: {env_name} declares no reflection symmetry (Environment.mirror_joint_signs)")
    return tuple(signs)


def mirror_sign_tensors(sig: RobotSignature, signs: tuple[float, ...], act_dof_indices: list[int] | None = None,
                        device: str | torch.device = "cpu") -> tuple[Tensor, Tensor]:
    """A reflection given per joint DoF as the factors that mirror world states (2 dof,) and joint torques (J,), for
    fixed-base world-frame robots without contacts (a UserError otherwise, or for a limit the reflection does not
    map onto its twin). Torques are the DoFs ``act_dof_indices`` (default: all of them). Fixed-base world-frame
    targets ``[Δq, Δq̇]`` mirror with the state factors."""
    if sig.floating_base or sig.states_frame != "world" or sig.contact_count or sig.dof_q != sig.dof_qd:
        raise UserError(f"mirror: {sig.env_name} is not a fixed-base world-frame robot without contacts; the option "
                        "covers those only")
    if len(signs) != sig.dof_q or any(s not in (-1.0, 1.0) for s in signs):
        raise UserError(f"mirror: {sig.env_name} needs one sign (+1 or -1) per joint DoF ({sig.dof_q}), got "
                        f"{list(signs)}")
    for index, lower, upper in sig.joint_limits:
        if signs[index] < 0 and lower != -upper:
            raise UserError(f"mirror: the limit [{lower:g}, {upper:g}] of joint coordinate {index} is not symmetric")
    state_signs = torch.tensor([*signs, *signs], dtype=torch.float32, device=device)
    act_signs = state_signs[: sig.dof_q] if act_dof_indices is None else state_signs[list(act_dof_indices)]
    return state_signs, act_signs


def active_contact_mask(depths: Tensor, thicknesses: Tensor) -> Tensor:
    """(..., C) bool: candidates close enough to the ground to matter."""
    threshold = torch.clamp(ACTIVE_THICKNESS_FACTOR * thicknesses, min=ACTIVE_DEPTH_FLOOR)
    return depths < threshold


def build_inputs(sig: RobotSignature, states: Tensor, root_body_q: Tensor, joint_acts: Tensor,
                 contacts: Mapping[str, Tensor] | None = None) -> tuple[dict[str, Tensor], Tensor | None]:
    """Robot-centric token groups of each step, and each step's anchor.

    Args:
        sig: The robot.
        states: (..., dof_q + dof_qd) world-frame states.
        root_body_q: (..., 7) world pose of the anchor body (used by fixed-base body-frame robots).
        joint_acts: (..., J) applied joint torques; ignored when the robot has none (J = 0).
        contacts: ``contact_normals``, ``contact_points_1`` (..., C, 3), ``contact_depths``,
            ``contact_thicknesses`` (..., C), world frame; ignored when the robot has no contacts.

    Returns:
        (groups, anchor): groups as in :attr:`RobotSignature.input_groups`, each (..., width); the anchor
        pose (..., 7), or None for world-frame robots.
    """
    layout = sig.layout
    body = layout.states_frame == "body"
    # A floating base in the world frame (the world-frame option) is expressed in the identity anchor.
    anchor = anchor_pose(states, layout, root_body_q) if body or layout.floating_base else None
    groups = {"states": states_to_anchor_frame(states, anchor, layout)}
    if sig.contact_count and sig.contact_inputs:
        points, normals = contacts["contact_points_1"], contacts["contact_normals"]
        depths = contacts["contact_depths"]
        if body:
            points, normals = contacts_to_anchor_frame(points, normals, anchor)
        active = active_contact_mask(depths, contacts["contact_thicknesses"])
        zero = torch.zeros((), dtype=points.dtype, device=points.device)
        groups["contact_normals"] = torch.where(active[..., None], normals, zero).flatten(-2)
        groups["contact_points_1"] = torch.where(active[..., None], points, zero).flatten(-2)
        groups["contact_depths"] = torch.where(active, depths, zero)
    if sig.joint_act_dim:
        groups["joint_acts"] = joint_acts
    if body:
        groups["gravity_dir"] = gravity_to_anchor_frame(anchor)
    if sig.joint_limits:
        groups.update(joint_limit_features(sig, states))
    return groups, anchor


def joint_limit_features(sig: RobotSignature, states: Tensor) -> dict[str, Tensor]:
    """The joint-limit input groups of ``sig``: ``joint_limits`` (..., 2L), per limited coordinate the penetration
    beyond its limit (q - upper above it, q - lower below it, 0 between) and the coordinate's rate while beyond it
    (0 between), L limits in ``sig.joint_limits`` order; with a look-ahead, ``joint_limit_lookahead`` (..., 2L),
    the same for ``q + q̇ * sig.joint_limit_lookahead``.

    Coordinates, limits and rates are the same in any frame, so the world-frame states serve every robot.
    """
    # Per-column views and Python-float limits: this runs every neural step, where index lists and limit tensors
    # would allocate (and, on a GPU, copy) afresh each time.
    # A free joint has 7 coordinates and 6 rates, so a joint's rate sits one column earlier in joint_qd.
    rate_offset = sig.dof_q - (1 if sig.floating_base else 0)
    rates = [states[..., rate_offset + i] for i, _, _ in sig.joint_limits]
    rate = torch.stack(rates, dim=-1)

    def penetration_and_rate(q: list[Tensor]) -> Tensor:
        depth = torch.stack([qi - qi.clamp(lo, hi) for qi, (_, lo, hi) in zip(q, sig.joint_limits, strict=True)],
                            dim=-1)
        return torch.cat([depth, torch.where(depth != 0.0, rate, 0.0)], dim=-1)

    q = [states[..., i] for i, _, _ in sig.joint_limits]
    groups = {JOINT_LIMITS: penetration_and_rate(q)}
    if sig.joint_limit_lookahead:
        dt = sig.joint_limit_lookahead
        groups[JOINT_LIMIT_LOOKAHEAD] = penetration_and_rate([qi + dt * ri for qi, ri in zip(q, rates, strict=True)])
    return groups


def build_targets(sig: RobotSignature, states: Tensor, next_states: Tensor, anchor: Tensor | None) -> Tensor:
    """(..., P) targets of each transition in the frame of its first step's inputs: the state change (NeRD), or
    with ``sig.prediction == "absolute"`` the next state itself (:func:`~nerd.representation.compute_absolute_target`).
    ``anchor`` is what :func:`build_inputs` returned for ``states``."""
    if sig.prediction == "absolute":
        return compute_absolute_target(states, next_states, anchor, sig.layout)
    return compute_target(states, next_states, anchor, sig.layout)


def apply_targets(sig: RobotSignature, states: Tensor, targets: Tensor, anchor: Tensor | None) -> Tensor:
    """(..., S) world-frame next states from ``states`` and (de-normalised) ``targets`` as :func:`build_targets`
    makes them; the inverse of :func:`build_targets`, and how the integrator applies a model's prediction."""
    if sig.prediction == "absolute":
        return integrate_absolute_target(states, targets, anchor, sig.layout)
    return integrate_target(states, targets, anchor, sig.layout)
