"""Robot-centric representation of states and contacts, and the relative prediction target.

NeRD sees every history step in the frame of that step's *anchor* (the robot's base) and predicts the change
of state over one frame in the anchor frame of the step it starts from, so a model trained in one place and
heading works in every other. This module holds those transforms and nothing engine-specific:
it is pure torch, batched over leading dimensions and differentiable.

State layout (Newton 1.8, checked in the engine)
    A state vector is ``[joint_q (dof_q), joint_qd (dof_qd)]``. For a floating-base robot the free joint
    comes first:

    - ``joint_q[:3]``: position ``p`` of the base body's origin, world frame [m];
    - ``joint_q[3:7]``: base orientation ``q``, unit quaternion xyzw (base → world);
    - ``joint_qd[:3]``: linear velocity ``v`` of the base body's **centre of mass**, world frame [m/s];
    - ``joint_qd[3:6]``: angular velocity ``ω`` of the base, world frame [rad/s];

    then hinge/slider coordinates and rates. Linear comes first, then angular (some write them the
    other way round; the engine's order is the one used here).

Why the velocity point matters and why no ``ω × r`` term appears: ``v`` is the COM velocity vector
expressed in world axes. Re-expressing it in the anchor's axes (``v_b = Rᵀ v``) changes only the axes it is
written in, not the point it belongs to, so it stays "the COM velocity, in base axes". A transport term would
be needed only if the engine's linear part referred to a frame-dependent point (such as the velocity of the
point at the world origin, the classical spatial-twist convention); in Newton 1.8 it does not. Note that
``v`` is therefore not ``ṗ`` (that is the origin's velocity); the representation never assumes it is.

Anchors
    A pose ``(..., 7)`` = ``[p_a (3), q_a (4)]`` in the world: the free base of the same step for floating
    robots in the body frame, the first moving link (from forward kinematics, passed in) for fixed-base
    robots in the body frame, the identity for robots kept in the world frame.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from nerd.device_constants import device_constant
from nerd.frames import (
    quat_conjugate,
    quat_identity,
    quat_mul,
    quat_normalize,
    quat_rotate,
    quat_rotate_inv,
    transform_point_inv,
    wrap_angle,
)

_GRAVITY_DIR_WORLD = (0.0, 0.0, -1.0)
"""Unit gravity direction in the Z-up world."""


@dataclass(frozen=True)
class StateLayout:
    """How a robot's state vector ``[joint_q, joint_qd]`` is laid out, and which frame the model sees it in."""

    dof_q: int
    """Number of joint coordinates (``joint_q`` width): 7 for a free joint, plus one per hinge/slider."""
    dof_qd: int
    """Number of joint velocities (``joint_qd`` width): 6 for a free joint, plus one per hinge/slider."""
    floating_base: bool = False
    """Whether ``joint_q[:7]`` / ``joint_qd[:6]`` are a free base joint (see the module docstring)."""
    continuous_q_indices: list[int] = field(default_factory=list)
    """Indices into ``joint_q`` of continuous revolute joints, kept wrapped into [−π, π)."""
    states_frame: Literal["world", "body"] = "world"
    """``"body"``: states, contacts and gravity are expressed in each step's anchor; ``"world"``: as is."""

    def __post_init__(self) -> None:
        if self.dof_q < 1 or self.dof_qd < 1:
            raise ValueError(f"StateLayout needs dof_q >= 1 and dof_qd >= 1, got {self.dof_q}, {self.dof_qd}.")
        if self.states_frame not in ("world", "body"):
            raise ValueError(f"StateLayout.states_frame must be 'world' or 'body', got {self.states_frame!r}.")
        if self.floating_base and (self.dof_q < 7 or self.dof_qd < 6):
            raise ValueError(
                f"A floating base needs dof_q >= 7 and dof_qd >= 6 (free joint first), got {self.dof_q}, "
                f"{self.dof_qd}; set floating_base=False for a fixed-base robot."
            )
        first_joint = 7 if self.floating_base else 0
        bad = [i for i in self.continuous_q_indices if not first_joint <= i < self.dof_q]
        if bad:
            raise ValueError(
                f"continuous_q_indices {bad} are out of range: they index joint_q, must lie in "
                f"[{first_joint}, {self.dof_q}) (after the free joint's 7 coordinates, if any)."
            )
        # A private sorted copy: the caller's list must not be able to change a frozen layout afterwards.
        object.__setattr__(self, "continuous_q_indices", sorted(set(self.continuous_q_indices)))

    @property
    def state_dim(self) -> int:
        """Width of a state vector, ``dof_q + dof_qd``."""
        return self.dof_q + self.dof_qd


def target_dim(layout: StateLayout) -> int:
    """Width ``P`` of the relative target: ``dof_q + dof_qd`` for every layout.

    Floating base: ``Δp (3) + δ (4) + Δq joints (dof_q − 7) + Δv (3) + Δω (3) + Δqd joints (dof_qd − 6)``;
    otherwise ``Δq (dof_q) + Δqd (dof_qd)``.
    """
    return layout.dof_q + layout.dof_qd


def _check_states(states: Tensor, layout: StateLayout, name: str = "states") -> None:
    if states.shape[-1] != layout.state_dim:
        raise ValueError(
            f"{name} has last dimension {states.shape[-1]}, but the layout expects dof_q + dof_qd = "
            f"{layout.dof_q} + {layout.dof_qd} = {layout.state_dim}."
        )


def _check_target(target: Tensor, layout: StateLayout) -> None:
    if target.shape[-1] != target_dim(layout):
        raise ValueError(
            f"target has last dimension {target.shape[-1]}, but the layout's target_dim is {target_dim(layout)}."
        )


@functools.lru_cache(maxsize=64)
def _index_mask(indices: tuple[int, ...], width: int, device: torch.device) -> Tensor:
    """(width,) bool mask that is True at ``indices``; cached, since rollouts ask for the same one every step."""
    # An ordinary tensor even when first asked for under inference mode (the integrator's step), so that
    # differentiable rollouts (nerd.diffsim) may use the cached mask later.
    with torch.inference_mode(False):
        mask = torch.zeros(width, dtype=torch.bool, device=device)
        mask[list(indices)] = True
    return mask


def _wrap_continuous(joint_q: Tensor, layout: StateLayout) -> Tensor:
    """Wrap the continuous columns of ``(..., dof_q)`` into [−π, π) without writing in place."""
    if not layout.continuous_q_indices:
        return joint_q
    mask = _index_mask(tuple(layout.continuous_q_indices), layout.dof_q, joint_q.device)
    return torch.where(mask, wrap_angle(joint_q), joint_q)


def anchor_pose(states: Tensor, layout: StateLayout, root_body_q: Tensor | None = None) -> Tensor:
    """The anchor pose of every step.

    Args:
        states: ``(..., dof_q + dof_qd)`` world-frame states.
        layout: The robot's state layout.
        root_body_q: ``(..., 7)`` world pose ``[p, q]`` of the first moving link; required for a fixed-base
            robot in the body frame, ignored otherwise.

    Returns:
        ``(..., 7)`` anchor poses ``[p_a [m], q_a (unit, xyzw)]`` in the world: the free base for floating
        robots in the body frame, ``root_body_q`` for fixed-base robots in the body frame, the identity for
        world-frame robots.
    """
    _check_states(states, layout)
    if layout.states_frame == "world":
        identity = quat_identity(states.shape[:-1], dtype=states.dtype, device=states.device)
        return torch.cat((torch.zeros_like(identity[..., :3]), identity), dim=-1)
    if layout.floating_base:
        return torch.cat((states[..., :3], quat_normalize(states[..., 3:7])), dim=-1)
    if root_body_q is None:
        raise ValueError(
            "A fixed-base robot in the body frame needs root_body_q (the first link's world pose from forward "
            "kinematics); pass it, or use states_frame='world'."
        )
    return torch.cat((root_body_q[..., :3], quat_normalize(root_body_q[..., 3:7])), dim=-1)


def states_to_anchor_frame(states: Tensor, anchor: Tensor | None, layout: StateLayout) -> Tensor:
    """Express world-frame states in their anchors.

    Floating base: ``p_b = Rᵀ(p − p_a)``, ``q_b = q_a⁻¹ ⊗ q``, ``v_b = Rᵀ v``, ``ω_b = Rᵀ ω`` (so with
    the base as its own anchor, ``p_b = 0`` and ``q_b`` is the identity). Joint coordinates are frame-free; the
    continuous ones are wrapped into [−π, π). Fixed-base robots only get the wrap.

    Args:
        states: ``(..., dof_q + dof_qd)`` world-frame states.
        anchor: ``(..., 7)`` anchor poses (one per step, see :func:`anchor_pose`); may be ``None`` unless the
            layout has a floating base.
        layout: The robot's state layout.

    Returns:
        ``(..., dof_q + dof_qd)`` states in the anchor frame.
    """
    _check_states(states, layout)
    joint_q = _wrap_continuous(states[..., : layout.dof_q], layout)
    joint_qd = states[..., layout.dof_q :]
    if not layout.floating_base:
        return torch.cat((joint_q, joint_qd), dim=-1)
    anchor = _require_anchor(anchor)
    q_a = anchor[..., 3:7]
    p_b = transform_point_inv(anchor, joint_q[..., :3])
    rot_b = quat_mul(quat_conjugate(q_a), joint_q[..., 3:7])
    v_b = quat_rotate_inv(q_a, joint_qd[..., :3])
    w_b = quat_rotate_inv(q_a, joint_qd[..., 3:6])
    return torch.cat((p_b, rot_b, joint_q[..., 7:], v_b, w_b, joint_qd[..., 6:]), dim=-1)


def states_from_anchor_frame(states_b: Tensor, anchor: Tensor | None, layout: StateLayout) -> Tensor:
    """Inverse of :func:`states_to_anchor_frame`: anchor-frame states back to the world.

    Floating base: ``p = R p_b + p_a``, ``q = q_a ⊗ q_b``, ``v = R v_b``, ``ω = R ω_b``; continuous joints are
    wrapped into [−π, π).

    Args:
        states_b: ``(..., dof_q + dof_qd)`` anchor-frame states.
        anchor: ``(..., 7)`` the anchor poses they are expressed in; may be ``None`` unless floating.
        layout: The robot's state layout.

    Returns:
        ``(..., dof_q + dof_qd)`` world-frame states.
    """
    _check_states(states_b, layout, "states_b")
    joint_q = _wrap_continuous(states_b[..., : layout.dof_q], layout)
    joint_qd = states_b[..., layout.dof_q :]
    if not layout.floating_base:
        return torch.cat((joint_q, joint_qd), dim=-1)
    anchor = _require_anchor(anchor)
    q_a = anchor[..., 3:7]
    p = quat_rotate(q_a, joint_q[..., :3]) + anchor[..., :3]
    rot = quat_mul(q_a, joint_q[..., 3:7])
    v = quat_rotate(q_a, joint_qd[..., :3])
    w = quat_rotate(q_a, joint_qd[..., 3:6])
    return torch.cat((p, rot, joint_q[..., 7:], v, w, joint_qd[..., 6:]), dim=-1)


def contacts_to_anchor_frame(points: Tensor, normals: Tensor, anchor: Tensor) -> tuple[Tensor, Tensor]:
    """Express contact ground points and normals in the anchor frame.

    Depths are frame-free and not touched; masking of inactive contacts happens after this, elsewhere.

    Args:
        points: ``(..., C, 3)`` contact ground points, world frame [m].
        normals: ``(..., C, 3)`` unit ground normals, world frame.
        anchor: ``(..., 7)`` anchor poses (identity for world-frame robots).

    Returns:
        ``(points_b, normals_b)``, each ``(..., C, 3)``: ``Rᵀ(x − p_a)`` [m] and ``Rᵀ n``.
    """
    anchor = anchor.unsqueeze(-2)
    return transform_point_inv(anchor, points), quat_rotate_inv(anchor[..., 3:7], normals)


def gravity_to_anchor_frame(anchor: Tensor) -> Tensor:
    """Unit gravity direction ``Rᵀ (0, 0, −1)`` in the anchor frame.

    Args:
        anchor: ``(..., 7)`` anchor poses.

    Returns:
        ``(..., 3)`` unit vectors: how the base sees "down", which is where its tilt lives once the base's
        own orientation has become the identity.
    """
    down = device_constant(_GRAVITY_DIR_WORLD, anchor).expand(*anchor.shape[:-1], 3)
    return quat_rotate_inv(anchor[..., 3:7], down)


def compute_target(states_t: Tensor, states_t1: Tensor, anchor_t: Tensor | None, layout: StateLayout) -> Tensor:
    """Relative prediction target from step t to t + 1, in the anchor frame of step t.

    Both states are expressed in the *same* anchor (that of step t) and differenced there:

    - ``Δp = Rᵀ(p_{t+1} − p_t)`` [m];
    - ``δ = q^b_{t+1} ⊗ (q^b_t)⁻¹`` with ``q^b = q_a⁻¹ ⊗ q``, i.e. the world-frame delta
      ``q_{t+1} ⊗ q_t⁻¹`` conjugated into the anchor, ``q_a⁻¹ ⊗ (q_{t+1} ⊗ q_t⁻¹) ⊗ q_a``: same
      rotation angle, axis expressed in anchor axes. A rigid motion ``(R_g, t_g)`` of the whole trajectory turns
      ``q_a`` into ``q_g ⊗ q_a`` and the world delta into ``q_g ⊗ δ_w ⊗ q_g⁻¹``, so ``δ`` is unchanged:
      invariant to yaw and translation. With the base as anchor it equals the body-frame delta
      ``q_t⁻¹ ⊗ q_{t+1}``. Its sign is chosen with ``w ≥ 0`` so that ``q`` and ``−q`` (the same rotation)
      give the same target;
    - ``Δq`` of joints, wrapped for continuous joints so a crossing of ±π gives a small step, not ~2π;
    - ``Δqd``: ``Rᵀ(v_{t+1} − v_t)``, ``Rᵀ(ω_{t+1} − ω_t)`` and joint-rate differences.

    Without a floating base it is ``[Δq (wrapped where continuous), Δqd]``.

    Args:
        states_t: ``(..., dof_q + dof_qd)`` world-frame states at step t.
        states_t1: ``(..., dof_q + dof_qd)`` world-frame states at step t + 1.
        anchor_t: ``(..., 7)`` anchor poses of step t; may be ``None`` unless floating.
        layout: The robot's state layout.

    Returns:
        ``(..., target_dim(layout))`` targets.
    """
    _check_states(states_t1, layout, "states_t1")
    s_b = states_to_anchor_frame(states_t, anchor_t, layout)
    s1_b = states_to_anchor_frame(states_t1, anchor_t, layout)
    delta = s1_b - s_b
    dq = _wrap_continuous(delta[..., : layout.dof_q], layout)
    if not layout.floating_base:
        return torch.cat((dq, delta[..., layout.dof_q :]), dim=-1)
    rot = quat_mul(s1_b[..., 3:7], quat_conjugate(s_b[..., 3:7]))
    rot = torch.where(rot[..., 3:] < 0, -rot, rot)
    return torch.cat((dq[..., :3], rot, dq[..., 7:], delta[..., layout.dof_q :]), dim=-1)


def integrate_target(states_t: Tensor, target: Tensor, anchor_t: Tensor | None, layout: StateLayout) -> Tensor:
    """Apply a relative target to the states of step t; the inverse of :func:`compute_target`.

    In the anchor frame of step t: ``p' = p + Δp``, ``q' = normalise(normalise(δ) ⊗ q)``, joints
    ``q' = q + Δq``, ``qd' = qd + Δqd``; then back to the world with the same anchor. Continuous joints are
    *not* wrapped in the result: the engine never wraps its joint coordinates, so a neural step must not
    either, or the two simulators would differ by 2π in their states (model inputs and Δq are wrapped).
    ``integrate_target(s_t, compute_target(s_t, s_t1, a, L), a, L)`` reproduces ``s_t1``; its
    quaternion comes out in the hemisphere of ``q_t`` (``q_t · q' ≥ 0``), which for an engine's continuous
    trajectory is ``q_{t+1}`` itself and otherwise ``−q_{t+1}``, the same rotation.

    Args:
        states_t: ``(..., dof_q + dof_qd)`` world-frame states at step t.
        target: ``(..., target_dim(layout))`` relative targets (de-normalised), e.g. a model's prediction.
        anchor_t: ``(..., 7)`` anchor poses of step t; may be ``None`` unless floating.
        layout: The robot's state layout.

    Returns:
        ``(..., dof_q + dof_qd)`` world-frame states at step t + 1.
    """
    _check_target(target, layout)
    s_b = states_to_anchor_frame(states_t, anchor_t, layout)
    if not layout.floating_base:
        s1 = states_from_anchor_frame(s_b + target, anchor_t, layout)
    else:
        rot = quat_normalize(quat_mul(quat_normalize(target[..., 3:7]), s_b[..., 3:7]))
        s1_b = torch.cat((
            s_b[..., :3] + target[..., :3],
            rot,
            s_b[..., 7:] + target[..., 7:],
        ), dim=-1)
        s1 = states_from_anchor_frame(s1_b, anchor_t, layout)
    if not layout.continuous_q_indices:
        return s1
    # Joint coordinates are frame-free, so the unwrapped sum is the continuous continuation of states_t.
    mask = _index_mask(tuple(layout.continuous_q_indices), s1.shape[-1], s1.device)
    return torch.where(mask, states_t + target, s1)


def _require_anchor(anchor: Tensor | None) -> Tensor:
    if anchor is None:
        raise ValueError("A floating-base layout needs an anchor pose (see anchor_pose); got None.")
    if anchor.shape[-1] != 7:
        raise ValueError(f"anchor must be (..., 7) = [p, quat xyzw], got last dimension {anchor.shape[-1]}.")
    return anchor


def compute_absolute_target(states_t: Tensor, states_t1: Tensor, anchor_t: Tensor | None, layout: StateLayout
                            ) -> Tensor:
    """Absolute prediction target (the ablation study's variant of NeRD's relative one): the state of step t + 1
    itself, expressed in the anchor frame of step t, the frame of that step's inputs.

    For a floating base that is ``[Rᵀ(p_{t+1} − p_a), q_a⁻¹ ⊗ q_{t+1}, joints, Rᵀ v_{t+1}, Rᵀ ω_{t+1}, joint rates]``
    with the quaternion's sign chosen with ``w ≥ 0`` (``q`` and ``−q`` are one rotation and must be one target);
    continuous joints are wrapped into [−π, π). ``states_t`` is read for its shape only: the anchor carries what
    the target depends on.

    Args:
        states_t: ``(..., dof_q + dof_qd)`` world-frame states at step t.
        states_t1: ``(..., dof_q + dof_qd)`` world-frame states at step t + 1.
        anchor_t: ``(..., 7)`` anchor poses of step t; may be ``None`` unless floating.
        layout: The robot's state layout.

    Returns:
        ``(..., target_dim(layout))`` targets.
    """
    _check_states(states_t, layout, "states_t")
    s1_b = states_to_anchor_frame(states_t1, anchor_t, layout)
    if not layout.floating_base:
        return s1_b
    rot = s1_b[..., 3:7]
    rot = torch.where(rot[..., 3:] < 0, -rot, rot)
    return torch.cat((s1_b[..., :3], rot, s1_b[..., 7:]), dim=-1)


def integrate_absolute_target(states_t: Tensor, target: Tensor, anchor_t: Tensor | None, layout: StateLayout
                              ) -> Tensor:
    """The world-frame state of step t + 1 from an absolute target; the inverse of :func:`compute_absolute_target`.

    The predicted quaternion is normalised and put in the hemisphere of ``q_t`` (as :func:`integrate_target`'s
    comes out), continuous joints continue ``states_t`` without a 2π jump (the engine never wraps them).

    Args:
        states_t: ``(..., dof_q + dof_qd)`` world-frame states at step t.
        target: ``(..., target_dim(layout))`` absolute targets (de-normalised), e.g. a model's prediction.
        anchor_t: ``(..., 7)`` anchor poses of step t; may be ``None`` unless floating.
        layout: The robot's state layout.

    Returns:
        ``(..., dof_q + dof_qd)`` world-frame states at step t + 1.
    """
    _check_target(target, layout)
    if layout.floating_base:
        target = torch.cat((target[..., :3], quat_normalize(target[..., 3:7]), target[..., 7:]), dim=-1)
    s1 = states_from_anchor_frame(target, anchor_t, layout)
    if layout.floating_base:
        rot = s1[..., 3:7]
        same_side = (rot * states_t[..., 3:7]).sum(dim=-1, keepdim=True) >= 0
        s1 = torch.cat((s1[..., :3], torch.where(same_side, rot, -rot), s1[..., 7:]), dim=-1)
    if not layout.continuous_q_indices:
        return s1
    # The wrapped prediction, continued from states_t: the engine's coordinate never jumps by 2π.
    mask = _index_mask(tuple(layout.continuous_q_indices), s1.shape[-1], s1.device)
    return torch.where(mask, states_t + wrap_angle(s1 - states_t), s1)
