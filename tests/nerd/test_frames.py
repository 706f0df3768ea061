"""Quaternion and frame maths in nerd.frames, checked against independent constructions."""

import math

import pytest
import torch

from nerd.frames import (
    quat_angle,
    quat_conjugate,
    quat_from_axis_angle,
    quat_from_euler_xyz,
    quat_identity,
    quat_inverse,
    quat_mul,
    quat_normalize,
    quat_rotate,
    quat_rotate_inv,
    quat_to_euler_xyz,
    quat_to_matrix,
    transform_point,
    transform_point_inv,
    wrap_angle,
)

TIGHT = dict(atol=1e-12, rtol=0.0)


def random_quat(n: int, gen: torch.Generator, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """Uniformly random unit quaternions (normalised Gaussians), shape (n, 4)."""
    return quat_normalize(torch.randn(n, 4, generator=gen, dtype=dtype)).to(device)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def test_mul_by_inverse_is_identity(gen, device):
    """q ⊗ q⁻¹ and q⁻¹ ⊗ q are the identity quaternion for unit q."""
    q = random_quat(256, gen, device=device)
    identity = quat_identity((256,), dtype=q.dtype, device=device)
    torch.testing.assert_close(quat_mul(q, quat_inverse(q)), identity, **TIGHT)
    torch.testing.assert_close(quat_mul(quat_inverse(q), q), identity, **TIGHT)


def test_mul_composes_rotations(gen, device):
    """Rotating by a ⊗ b equals rotating by b, then by a."""
    a, b = random_quat(64, gen, device=device), random_quat(64, gen, device=device)
    v = torch.randn(64, 3, generator=gen, dtype=torch.float64).to(device)
    torch.testing.assert_close(quat_rotate(quat_mul(a, b), v), quat_rotate(a, quat_rotate(b, v)), **TIGHT)


def test_rotate_matches_matrix_and_inverse(gen, device):
    """quat_rotate equals R(q) v, quat_rotate_inv equals Rᵀ v, and R is orthonormal with det 1."""
    q = random_quat(128, gen, device=device)
    v = torch.randn(128, 3, generator=gen, dtype=torch.float64).to(device)
    m = quat_to_matrix(q)
    torch.testing.assert_close(quat_rotate(q, v), (m @ v.unsqueeze(-1)).squeeze(-1), **TIGHT)
    torch.testing.assert_close(quat_rotate_inv(q, v), (m.transpose(-1, -2) @ v.unsqueeze(-1)).squeeze(-1), **TIGHT)
    eye = torch.eye(3, dtype=q.dtype, device=device).expand_as(m)
    torch.testing.assert_close(m @ m.transpose(-1, -2), eye, **TIGHT)
    torch.testing.assert_close(torch.linalg.det(m), torch.ones(128, dtype=q.dtype, device=device), **TIGHT)


def test_axis_angle_about_z_rotates_x_to_y(device):
    """A +90° rotation about z maps +x to +y (right-hand rule, xyzw layout)."""
    q = quat_from_axis_angle(torch.tensor([0.0, 0.0, 2.0], device=device), torch.tensor(math.pi / 2, device=device))
    torch.testing.assert_close(q, torch.tensor([0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)], device=device))
    torch.testing.assert_close(quat_rotate(q, torch.tensor([1.0, 0.0, 0.0], device=device)),
                               torch.tensor([0.0, 1.0, 0.0], device=device), atol=1e-6, rtol=0.0)


def test_quat_angle_of_axis_angle(gen, device):
    """quat_angle(axis_angle(a, θ)) = |θ| for θ ∈ (−π, π), for either sign of the quaternion."""
    theta = (torch.rand(512, generator=gen, dtype=torch.float64) * 2 - 1).mul(math.pi * 0.999).to(device)
    axis = torch.randn(512, 3, generator=gen, dtype=torch.float64).to(device)
    q = quat_from_axis_angle(axis, theta)
    torch.testing.assert_close(quat_angle(q), theta.abs(), atol=1e-10, rtol=0.0)
    torch.testing.assert_close(quat_angle(-q), theta.abs(), atol=1e-10, rtol=0.0)


def test_quat_angle_gradient_finite_at_identity(device):
    """The rotation angle has a finite gradient at the identity (used in orientation-error losses)."""
    q = quat_identity((4,), dtype=torch.float64, device=device).requires_grad_(True)
    quat_angle(q).sum().backward()
    assert torch.isfinite(q.grad).all()


def test_wrap_angle_range_and_periodicity(gen, device):
    """wrap_angle lands in [−π, π), keeps values already there, and is 2π-periodic."""
    x = (torch.rand(4096, generator=gen, dtype=torch.float64) * 2 - 1).mul(40.0).to(device)
    w = wrap_angle(x)
    assert (w >= -math.pi).all() and (w < math.pi).all()
    torch.testing.assert_close(torch.sin(w), torch.sin(x), atol=1e-12, rtol=0.0)
    torch.testing.assert_close(torch.cos(w), torch.cos(x), atol=1e-12, rtol=0.0)
    inside = (torch.rand(256, generator=gen, dtype=torch.float64) * 2 - 1).mul(math.pi * 0.999).to(device)
    torch.testing.assert_close(wrap_angle(inside), inside, **TIGHT)
    torch.testing.assert_close(wrap_angle(inside + 6 * math.pi), inside, atol=1e-12, rtol=0.0)
    # Just below −π, x + π is a tiny negative number whose remainder rounds up to exactly 2π.
    below = torch.nextafter(torch.tensor(-math.pi, dtype=torch.float64), torch.tensor(-4.0, dtype=torch.float64))
    edges = torch.stack((below, *torch.tensor([math.pi, -math.pi, 3 * math.pi], dtype=torch.float64))).to(device)
    assert (wrap_angle(edges) < math.pi).all() and (wrap_angle(edges) >= -math.pi).all()


def test_euler_xyz_is_extrinsic_x_then_y_then_z(gen, device):
    """quat_from_euler_xyz([α, β, γ]) = q_z(γ) ⊗ q_y(β) ⊗ q_x(α), i.e. R = Rz·Ry·Rx."""
    euler = (torch.rand(256, 3, generator=gen, dtype=torch.float64) * 2 - 1).mul(math.pi).to(device)
    ex, ey, ez = (torch.eye(3, dtype=torch.float64, device=device)[i].expand(256, 3) for i in range(3))
    expected = quat_mul(quat_from_axis_angle(ez, euler[:, 2]),
                        quat_mul(quat_from_axis_angle(ey, euler[:, 1]), quat_from_axis_angle(ex, euler[:, 0])))
    torch.testing.assert_close(quat_from_euler_xyz(euler), expected, **TIGHT)
    # Rz·Ry·Rx differs from the intrinsic Rx·Ry·Rz for generic angles, so the order is really pinned down.
    other = quat_mul(quat_from_axis_angle(ex, euler[:, 0]),
                     quat_mul(quat_from_axis_angle(ey, euler[:, 1]), quat_from_axis_angle(ez, euler[:, 2])))
    assert (quat_angle(quat_mul(other, quat_conjugate(expected))) > 1e-3).any()


def test_euler_xyz_round_trip(gen, device):
    """quat_to_euler_xyz inverts quat_from_euler_xyz for pitch inside ±π/2, and recovers a pure yaw's angle."""
    euler = (torch.rand(256, 3, generator=gen, dtype=torch.float64) * 2 - 1).to(device)
    euler = euler * torch.tensor([math.pi, 0.49 * math.pi, math.pi], dtype=torch.float64, device=device)
    torch.testing.assert_close(quat_to_euler_xyz(quat_from_euler_xyz(euler)), euler, **TIGHT)
    ez = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64, device=device).expand(256, 3)
    yaw = quat_to_euler_xyz(quat_from_axis_angle(ez, euler[:, 2]))
    torch.testing.assert_close(yaw, torch.stack((0 * euler[:, 2], 0 * euler[:, 2], euler[:, 2]), dim=-1), **TIGHT)


def test_transform_point_round_trip(gen, device):
    """transform_point_inv undoes transform_point, and a pose maps its child origin to its position."""
    pose = torch.cat((torch.randn(32, 3, generator=gen, dtype=torch.float64).to(device),
                      random_quat(32, gen, device=device)), dim=-1)
    p = torch.randn(32, 5, 3, generator=gen, dtype=torch.float64).to(device)
    each = pose.unsqueeze(1)   # one pose for all 5 points of a row
    torch.testing.assert_close(transform_point_inv(each, transform_point(each, p)), p, **TIGHT)
    torch.testing.assert_close(transform_point(pose, torch.zeros_like(pose[:, :3])), pose[:, :3], **TIGHT)


def test_normalize_zero_quaternion_is_finite(device):
    """Normalising a zero quaternion gives zeros, not NaN."""
    assert torch.isfinite(quat_normalize(torch.zeros(3, 4, device=device))).all()
