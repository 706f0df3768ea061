"""Quaternion and rigid-frame maths on batched torch tensors: the project's single home for it.

Conventions (the same as Warp and Newton):

- Quaternions are ``xyzw``: the vector part first, the scalar part last, shape ``(..., 4)``.
- A quaternion ``q`` maps a vector from the frame it describes to its parent frame:
  ``v_parent = quat_rotate(q, v_local)``; composition ``quat_mul(a, b)`` applies ``b`` first, then ``a``.
- A pose is ``(..., 7)`` = ``[p (3), q (4)]``: the child frame's origin and orientation in the parent frame,
  so ``x_parent = R(q) x_child + p``.
- The world is Z-up; angles are in radians, lengths in metres.

Every function broadcasts over leading dimensions, works on any device and dtype, keeps the autograd graph
(no in-place writes, no ``.item()``), and never imports warp or newton, so models, datasets and training can
use it without the engine.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nerd.device_constants import device_constant

_NORM_EPS = 1e-12
"""Floor for norms we divide by: a zero quaternion or axis then yields zeros instead of NaN."""


def quat_identity(shape: tuple[int, ...] = (), *, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None) -> Tensor:
    """Identity rotations.

    Args:
        shape: Leading (batch) shape.
        dtype: Floating dtype; torch's default when ``None``.
        device: Device; torch's default when ``None``.

    Returns:
        ``(*shape, 4)`` quaternions ``[0, 0, 0, 1]`` (xyzw).
    """
    q = torch.zeros(*shape, 4, dtype=dtype, device=device)
    return q.index_fill(-1, device_constant((3,), q, torch.long), 1.0)


def quat_mul(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product ``a ⊗ b``: the rotation ``b`` followed by ``a``.

    Args:
        a: ``(..., 4)`` quaternions, xyzw.
        b: ``(..., 4)`` quaternions, xyzw; broadcast against ``a``.

    Returns:
        ``(..., 4)`` product, xyzw (unit when both inputs are unit).
    """
    av, aw = a[..., :3], a[..., 3:]
    bv, bw = b[..., :3], b[..., 3:]
    vec = aw * bv + bw * av + torch.linalg.cross(*torch.broadcast_tensors(av, bv), dim=-1)
    scalar = aw * bw - (av * bv).sum(dim=-1, keepdim=True)
    return torch.cat((vec, scalar), dim=-1)


def quat_conjugate(q: Tensor) -> Tensor:
    """Conjugate ``[-x, -y, -z, w]`` of ``(..., 4)`` xyzw quaternions."""
    return torch.cat((-q[..., :3], q[..., 3:]), dim=-1)


def quat_inverse(q: Tensor) -> Tensor:
    """Inverse of **unit** ``(..., 4)`` xyzw quaternions (their conjugate).

    States and anchors carry unit quaternions, and dividing by the squared norm would only add rounding, so
    the norm is not re-checked here; call :func:`quat_normalize` first on anything that may have drifted.
    """
    return quat_conjugate(q)


def quat_normalize(q: Tensor, eps: float = _NORM_EPS) -> Tensor:
    """Scale ``(..., 4)`` quaternions to unit norm (a zero quaternion stays zero instead of becoming NaN)."""
    return q / q.norm(dim=-1, keepdim=True).clamp_min(eps)


def quat_rotate(q: Tensor, v: Tensor) -> Tensor:
    """Rotate vectors by unit quaternions: ``R(q) v``.

    Args:
        q: ``(..., 4)`` unit quaternions, xyzw.
        v: ``(..., 3)`` vectors in the frame ``q`` describes; broadcast against ``q``.

    Returns:
        ``(..., 3)`` the same vectors expressed in the parent frame.
    """
    u, w = q[..., :3], q[..., 3:]
    u, v = torch.broadcast_tensors(u, v)
    # v' = v + 2w (u × v) + 2 u × (u × v): the sandwich q v q* without building the matrix.
    t = 2.0 * torch.linalg.cross(u, v, dim=-1)
    return v + w * t + torch.linalg.cross(u, t, dim=-1)


def quat_rotate_inv(q: Tensor, v: Tensor) -> Tensor:
    """Rotate vectors by the inverse of unit quaternions: ``R(q)ᵀ v`` (parent frame → frame of ``q``).

    Args:
        q: ``(..., 4)`` unit quaternions, xyzw.
        v: ``(..., 3)`` vectors in the parent frame; broadcast against ``q``.

    Returns:
        ``(..., 3)`` the vectors expressed in the frame ``q`` describes.
    """
    return quat_rotate(quat_conjugate(q), v)


def quat_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrices of unit quaternions.

    Args:
        q: ``(..., 4)`` unit quaternions, xyzw.

    Returns:
        ``(..., 3, 3)`` matrices ``R`` with ``R @ v == quat_rotate(q, v)``.
    """
    x, y, z, w = q.unbind(dim=-1)
    rows = (
        1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y),
    )
    return torch.stack(rows, dim=-1).reshape(*q.shape[:-1], 3, 3)


def quat_from_axis_angle(axis: Tensor, angle: Tensor) -> Tensor:
    """Quaternions rotating by ``angle`` about ``axis`` (right-hand rule).

    Args:
        axis: ``(..., 3)`` rotation axes; normalised here, so any non-zero length works.
        angle: ``(...)`` rotation angles [rad]; broadcast against ``axis[..., 0]``.

    Returns:
        ``(..., 4)`` unit quaternions, xyzw.
    """
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp_min(_NORM_EPS)
    half = 0.5 * torch.as_tensor(angle, dtype=axis.dtype, device=axis.device).unsqueeze(-1)
    vec = axis * torch.sin(half)
    return torch.cat((vec, torch.cos(half).expand(*vec.shape[:-1], 1)), dim=-1)


def quat_angle(q: Tensor) -> Tensor:
    """Rotation angle of quaternions, in ``[0, π]`` and the same for ``q`` and ``-q``.

    ``2·atan2(|v|, |w|)`` instead of ``2·acos(w)``: it needs no unit norm, treats both signs alike and stays
    accurate (with a finite gradient) near the identity, where ``acos`` loses precision.

    Args:
        q: ``(..., 4)`` quaternions, xyzw (any non-zero norm).

    Returns:
        ``(...)`` angles [rad].
    """
    return 2.0 * torch.atan2(q[..., :3].norm(dim=-1), q[..., 3].abs())


def quat_from_euler_xyz(euler: Tensor) -> Tensor:
    """Quaternions from xyz Euler angles, **extrinsic**: rotate about the fixed x, then y, then z axis.

    ``R = Rz(γ) · Ry(β) · Rx(α)``, i.e. ``q = q_z ⊗ q_y ⊗ q_x``; the same as intrinsic z-y'-x'' rotations,
    as SciPy's ``Rotation.from_euler("xyz", ...)`` and Warp's ``quat_rpy(roll, pitch, yaw)``.

    Args:
        euler: ``(..., 3)`` angles ``[α, β, γ]`` about x, y, z [rad].

    Returns:
        ``(..., 4)`` unit quaternions, xyzw.
    """
    half = 0.5 * euler
    cx, cy, cz = torch.cos(half).unbind(dim=-1)
    sx, sy, sz = torch.sin(half).unbind(dim=-1)
    return torch.stack((
        sx * cy * cz - cx * sy * sz,
        cx * sy * cz + sx * cy * sz,
        cx * cy * sz - sx * sy * cz,
        cx * cy * cz + sx * sy * sz,
    ), dim=-1)


def quat_to_euler_xyz(q: Tensor) -> Tensor:
    """The xyz Euler angles of :func:`quat_from_euler_xyz` (its inverse): roll α, pitch β in [−π/2, π/2] and yaw γ.

    Args:
        q: ``(..., 4)`` unit quaternions, xyzw.

    Returns:
        ``(..., 3)`` angles ``[α, β, γ]`` [rad], α and γ in (−π, π].
    """
    x, y, z, w = q.unbind(dim=-1)
    roll = torch.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = torch.asin((2.0 * (w * y - z * x)).clamp(-1.0, 1.0))
    yaw = torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return torch.stack((roll, pitch, yaw), dim=-1)


def transform_point(pose: Tensor, p: Tensor) -> Tensor:
    """Map points from a pose's child frame to its parent frame: ``R(q) p + t``.

    Args:
        pose: ``(..., 7)`` ``[t, q]`` (child origin in the parent [m], unit xyzw orientation).
        p: ``(..., 3)`` points in the child frame [m]; broadcast against ``pose``.

    Returns:
        ``(..., 3)`` the points in the parent frame [m].
    """
    return quat_rotate(pose[..., 3:7], p) + pose[..., :3]


def transform_point_inv(pose: Tensor, p: Tensor) -> Tensor:
    """Map points from a pose's parent frame to its child frame: ``R(q)ᵀ (p − t)``.

    Args:
        pose: ``(..., 7)`` ``[t, q]`` (child origin in the parent [m], unit xyzw orientation).
        p: ``(..., 3)`` points in the parent frame [m]; broadcast against ``pose``.

    Returns:
        ``(..., 3)`` the points in the child frame [m].
    """
    return quat_rotate_inv(pose[..., 3:7], p - pose[..., :3])


def wrap_angle(x: Tensor) -> Tensor:
    """Wrap angles into ``[−π, π)`` with gradient 1 (the wrap is a piecewise shift).

    Args:
        x: Angles of any shape [rad].

    Returns:
        Angles of the same shape, congruent to ``x`` modulo 2π.
    """
    wrapped = torch.remainder(x + math.pi, 2.0 * math.pi) - math.pi
    # A tiny negative x + π rounds its remainder up to exactly 2π, which would land on +π.
    return torch.where(wrapped >= math.pi, wrapped - 2.0 * math.pi, wrapped)


Y_UP_BASE_ROTATION = (-math.sqrt(0.5), 0.0, 0.0, math.sqrt(0.5))
"""q_c = rot(x, −π/2), xyzw: the NeRD release's turn of a Z-up robot (Ant, ANYmal) into its Y-up world; the
release's base orientation is ``q_c ⊗ q`` for our Z-up orientation q."""


def to_y_up(vectors: Tensor) -> Tensor:
    """World vectors ``(..., 3)`` in the release's Y-up axes: ``(x, y, z) -> (x, z, −y)``."""
    return torch.stack([vectors[..., 0], vectors[..., 2], -vectors[..., 1]], dim=-1)
