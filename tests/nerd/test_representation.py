"""Robot-centric representation and relative targets in nerd.representation."""

import math

import pytest
import torch

from nerd.frames import (
    quat_angle,
    quat_conjugate,
    quat_from_axis_angle,
    quat_identity,
    quat_mul,
    quat_normalize,
    quat_rotate,
)
from nerd.representation import (
    StateLayout,
    anchor_pose,
    compute_target,
    contacts_to_anchor_frame,
    gravity_to_anchor_frame,
    integrate_target,
    states_from_anchor_frame,
    states_to_anchor_frame,
    target_dim,
)

ANT = StateLayout(dof_q=15, dof_qd=14, floating_base=True, states_frame="body")
CARTPOLE = StateLayout(dof_q=2, dof_qd=2, continuous_q_indices=[1], states_frame="world")
ANT_WORLD = StateLayout(dof_q=15, dof_qd=14, floating_base=True, states_frame="world")
PENDULUM = StateLayout(dof_q=2, dof_qd=2, continuous_q_indices=[0, 1], states_frame="body")

TIGHT = dict(atol=1e-10, rtol=0.0)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(2025)


def floating_states(shape, gen, dtype=torch.float64, device="cpu") -> torch.Tensor:
    """Random Ant-like world-frame states (*shape, 29): base a few metres from the origin, any orientation."""
    n = math.prod(shape)
    p = torch.randn(n, 3, generator=gen, dtype=dtype) * 3.0
    q = quat_normalize(torch.randn(n, 4, generator=gen, dtype=dtype))
    joints = torch.rand(n, 8, generator=gen, dtype=dtype) * 2 - 1
    qd = torch.randn(n, 14, generator=gen, dtype=dtype) * 2.0
    return torch.cat((p, q, joints, qd), dim=-1).reshape(*shape, 29).to(device)


def step_floating(states, gen) -> torch.Tensor:
    """A plausible next state: a small base rotation and small changes of every other coordinate."""
    axis = torch.randn(*states.shape[:-1], 3, generator=gen, dtype=states.dtype).to(states.device)
    angle = 0.1 * torch.rand(*states.shape[:-1], generator=gen, dtype=states.dtype).to(states.device)
    q1 = quat_mul(quat_from_axis_angle(axis, angle), states[..., 3:7])
    noise = 0.05 * torch.randn(states.shape, generator=gen, dtype=states.dtype).to(states.device)
    return torch.cat((states[..., :3] + noise[..., :3], q1, states[..., 7:] + noise[..., 7:]), dim=-1)


def rigid_transform(states, points, normals, rot, shift):
    """Move a whole floating-base scene by the rotation `rot` (xyzw) and translation `shift` (world frame)."""
    rs = rot.expand(*states.shape[:-1], 4)
    moved = torch.cat((
        quat_rotate(rs, states[..., :3]) + shift,
        quat_mul(rs, states[..., 3:7]),
        states[..., 7:15],
        quat_rotate(rs, states[..., 15:18]),
        quat_rotate(rs, states[..., 18:21]),
        states[..., 21:],
    ), dim=-1)
    rc = rot.expand(*points.shape[:-1], 4)
    return moved, quat_rotate(rc, points) + shift, quat_rotate(rc, normals)


def test_target_dim_and_layout_checks():
    """target_dim is dof_q + dof_qd, and inconsistent layouts are rejected with a ValueError."""
    assert target_dim(ANT) == 29 and target_dim(CARTPOLE) == 4
    with pytest.raises(ValueError, match="floating"):
        StateLayout(dof_q=5, dof_qd=4, floating_base=True)
    with pytest.raises(ValueError, match="continuous_q_indices"):
        StateLayout(dof_q=15, dof_qd=14, floating_base=True, continuous_q_indices=[3])
    with pytest.raises(ValueError, match="states_frame"):
        StateLayout(dof_q=2, dof_qd=2, states_frame="base")


def test_anchor_pose_per_layout(gen, device):
    """Anchors are the free base (floating), the given root pose (fixed-base body), the identity (world)."""
    s = floating_states((6,), gen, device=device)
    torch.testing.assert_close(anchor_pose(s, ANT), s[:, :7], **TIGHT)
    cart = torch.randn(6, 4, generator=gen, dtype=torch.float64).to(device)
    ident = torch.cat((torch.zeros(6, 3, dtype=torch.float64, device=device),
                       quat_identity((6,), dtype=torch.float64, device=device)), dim=-1)
    torch.testing.assert_close(anchor_pose(cart, CARTPOLE), ident, **TIGHT)
    root = s[:, :7]
    torch.testing.assert_close(anchor_pose(cart, PENDULUM, root_body_q=root), root, **TIGHT)
    with pytest.raises(ValueError, match="root_body_q"):
        anchor_pose(cart, PENDULUM)


def test_base_becomes_origin_and_velocity_rotates_into_base_axes(device):
    """In its own anchor the base sits at 0 with identity orientation; a yaw of +90° turns world +y into base +x."""
    yaw = quat_from_axis_angle(torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64),
                               torch.tensor(math.pi / 2, dtype=torch.float64))
    s = torch.zeros(29, dtype=torch.float64)
    s[:3] = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    s[3:7] = yaw
    s[15:18] = torch.tensor([0.0, 3.0, 0.0], dtype=torch.float64)   # base COM moving along world +y
    s[18:21] = torch.tensor([0.0, 0.0, 0.7], dtype=torch.float64)   # spinning about world z
    s = s.to(device)
    b = states_to_anchor_frame(s, anchor_pose(s, ANT), ANT)
    torch.testing.assert_close(b[:3], torch.zeros(3, dtype=s.dtype, device=device), **TIGHT)
    torch.testing.assert_close(b[3:7], quat_identity(dtype=s.dtype, device=device), **TIGHT)
    torch.testing.assert_close(b[15:18], torch.tensor([3.0, 0.0, 0.0], dtype=s.dtype, device=device), **TIGHT)
    torch.testing.assert_close(b[18:21], torch.tensor([0.0, 0.0, 0.7], dtype=s.dtype, device=device), **TIGHT)


def test_floating_world_anchor_world_round_trip(gen, device):
    """world → anchor → world reproduces Ant-like states, in every step's own anchor and in a foreign one."""
    s = floating_states((8, 10), gen, device=device)
    own = anchor_pose(s, ANT)
    torch.testing.assert_close(states_from_anchor_frame(states_to_anchor_frame(s, own, ANT), own, ANT), s, **TIGHT)
    foreign = anchor_pose(floating_states((8, 10), gen, device=device), ANT)
    b = states_to_anchor_frame(s, foreign, ANT)
    assert (b - s).abs().max() > 1e-2   # the transform really did something
    torch.testing.assert_close(states_from_anchor_frame(b, foreign, ANT), s, **TIGHT)


def test_world_layout_round_trip_wraps_continuous_joint(gen, device):
    """Cartpole-like states survive the round trip; only the continuous pole angle is wrapped into [−π, π)."""
    s = (torch.rand(64, 4, generator=gen, dtype=torch.float64) * 2 - 1).to(device)
    s = s * torch.tensor([3.5, math.pi, 10.0, 10.0], dtype=s.dtype, device=device)
    anchor = anchor_pose(s, CARTPOLE)
    torch.testing.assert_close(states_from_anchor_frame(states_to_anchor_frame(s, anchor, CARTPOLE), anchor, CARTPOLE),
                               s, **TIGHT)
    unwrapped = s + torch.tensor([0.0, 4 * math.pi, 0.0, 0.0], dtype=s.dtype, device=device)
    torch.testing.assert_close(states_to_anchor_frame(unwrapped, anchor, CARTPOLE), s, atol=1e-12, rtol=0.0)
    big_x = s + torch.tensor([10.0, 0.0, 0.0, 0.0], dtype=s.dtype, device=device)
    torch.testing.assert_close(states_to_anchor_frame(big_x, anchor, CARTPOLE), big_x, **TIGHT)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_floating_target_round_trip(gen, device, dtype, tol):
    """integrate_target(s_t, compute_target(s_t, s_t1)) reproduces s_t1 for a floating base."""
    s0 = floating_states((32, 6), gen, dtype=dtype, device=device)
    s1 = step_floating(s0, gen)
    anchor = anchor_pose(s0, ANT)
    target = compute_target(s0, s1, anchor, ANT)
    assert target.shape == (32, 6, target_dim(ANT))
    torch.testing.assert_close(integrate_target(s0, target, anchor, ANT), s1, atol=tol, rtol=0.0)
    # The base-frame position delta is the world displacement seen from the base: |Δp| = |p1 − p0|.
    torch.testing.assert_close(target[..., :3].norm(dim=-1), (s1[..., :3] - s0[..., :3]).norm(dim=-1),
                               atol=tol, rtol=0.0)


def test_floating_target_round_trip_in_other_anchors(gen, device):
    """The round trip also holds in the world-frame ablation (identity anchor) and in a foreign anchor."""
    s0 = floating_states((64,), gen, device=device)
    s1 = step_floating(s0, gen)
    foreign = anchor_pose(floating_states((64,), gen, device=device), ANT)
    for anchor, layout in ((anchor_pose(s0, ANT_WORLD), ANT_WORLD), (foreign, ANT)):
        target = compute_target(s0, s1, anchor, layout)
        torch.testing.assert_close(integrate_target(s0, target, anchor, layout), s1, **TIGHT)
    # In the world frame δ is the world delta q1 ⊗ q0⁻¹.
    world_delta = quat_mul(s1[:, 3:7], quat_conjugate(s0[:, 3:7]))
    torch.testing.assert_close(compute_target(s0, s1, anchor_pose(s0, ANT_WORLD), ANT_WORLD)[:, 3:7], world_delta,
                               **TIGHT)


def test_floating_target_quaternion_sign(gen, device):
    """q and −q give the same δ (w ≥ 0), and integration returns the same rotation as q_{t+1}."""
    s0 = floating_states((64,), gen, device=device)
    s1 = floating_states((64,), gen, device=device)   # large, arbitrary rotations between the steps
    anchor = anchor_pose(s0, ANT)
    flipped = torch.cat((s1[:, :3], -s1[:, 3:7], s1[:, 7:]), dim=-1)
    t, t_flipped = compute_target(s0, s1, anchor, ANT), compute_target(s0, flipped, anchor, ANT)
    torch.testing.assert_close(t, t_flipped, **TIGHT)
    assert (t[:, 6] >= 0).all()
    out = integrate_target(s0, t, anchor, ANT)
    angle_error = quat_angle(quat_mul(out[:, 3:7], quat_conjugate(s1[:, 3:7])))
    torch.testing.assert_close(angle_error, torch.zeros_like(angle_error), atol=1e-6, rtol=0.0)
    keep = [i for i in range(29) if i not in range(3, 7)]
    torch.testing.assert_close(out[:, keep], s1[:, keep], **TIGHT)


def test_world_target_crossing_pi_is_small(device):
    """A continuous joint crossing ±π gives a small Δq (not ~2π); integration continues it unwrapped like the engine."""
    s0 = torch.tensor([[0.3, math.pi - 0.01, 1.0, 2.0]], dtype=torch.float64, device=device)
    s1 = torch.tensor([[0.35, -math.pi + 0.02, 1.5, 2.5]], dtype=torch.float64, device=device)
    anchor = anchor_pose(s0, CARTPOLE)
    target = compute_target(s0, s1, anchor, CARTPOLE)
    torch.testing.assert_close(target, torch.tensor([[0.05, 0.03, 0.5, 0.5]], dtype=s0.dtype, device=device),
                               atol=1e-12, rtol=0.0)
    unwrapped = s1 + torch.tensor([[0.0, 2 * math.pi, 0.0, 0.0]], dtype=s0.dtype, device=device)
    torch.testing.assert_close(integrate_target(s0, target, anchor, CARTPOLE), unwrapped, atol=1e-12, rtol=0.0)


def test_world_and_fixed_base_target_round_trip(gen, device):
    """Round trip for random Cartpole-like and pendulum-like (fixed base, body frame) transitions."""
    for layout in (CARTPOLE, PENDULUM):
        s0 = (torch.rand(128, 4, generator=gen, dtype=torch.float64) * 2 - 1).mul(math.pi).to(device)
        s1_unwrapped = s0 + 0.3 * torch.randn(128, 4, generator=gen, dtype=torch.float64).to(device)
        s1 = states_to_anchor_frame(s1_unwrapped, None, layout)   # wrapped where continuous
        root = floating_states((128,), gen, device=device)[:, :7]
        anchor = anchor_pose(s0, layout, root_body_q=root)
        target = compute_target(s0, s1, anchor, layout)
        assert target[:, layout.continuous_q_indices].abs().max() < math.pi
        # Integration continues s0 without wrapping, as the engine does: it recovers the unwrapped s1.
        torch.testing.assert_close(integrate_target(s0, target, anchor, layout), s1_unwrapped, **TIGHT)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_spatial_invariance_under_yaw_and_translation(gen, device, dtype, tol):
    """A rigid yaw + translation of a whole trajectory leaves states, contacts, gravity and targets unchanged."""
    s = floating_states((16, 5), gen, dtype=dtype, device=device)
    points = torch.randn(16, 5, 4, 3, generator=gen, dtype=dtype).to(device) * 2.0
    normals = quat_normalize(torch.randn(16, 5, 4, 3, generator=gen, dtype=dtype).to(device))
    yaw = quat_from_axis_angle(torch.tensor([0.0, 0.0, 1.0], dtype=dtype, device=device),
                               torch.rand((), generator=gen, dtype=dtype).to(device) * 2 * math.pi)
    shift = torch.tensor([3.0, -2.0, 0.5], dtype=dtype, device=device)
    s_m, points_m, normals_m = rigid_transform(s, points, normals, yaw, shift)

    def features(states, pts, nrm):
        anchor = anchor_pose(states, ANT)
        pb, nb = contacts_to_anchor_frame(pts, nrm, anchor)
        return dict(states=states_to_anchor_frame(states, anchor, ANT), points=pb, normals=nb,
                    gravity=gravity_to_anchor_frame(anchor),
                    target=compute_target(states[:, :-1], states[:, 1:], anchor[:, :-1], ANT))

    ref, moved = features(s, points, normals), features(s_m, points_m, normals_m)
    assert (s_m - s).abs().max() > 0.1   # the scene really moved
    for key in ref:
        torch.testing.assert_close(moved[key], ref[key], atol=tol, rtol=0.0, msg=f"{key} changed under yaw")


def test_tilt_changes_only_gravity(gen, device):
    """A rigid tilt about x keeps states, contacts and targets but changes the gravity direction in the base."""
    s = floating_states((16, 5), gen, device=device)
    points = torch.randn(16, 5, 4, 3, generator=gen, dtype=s.dtype).to(device)
    normals = quat_normalize(torch.randn(16, 5, 4, 3, generator=gen, dtype=s.dtype).to(device))
    tilt = quat_from_axis_angle(torch.tensor([1.0, 0.0, 0.0], dtype=s.dtype, device=device),
                                torch.tensor(0.6, dtype=s.dtype, device=device))
    s_m, points_m, normals_m = rigid_transform(s, points, normals, tilt, torch.zeros(3, dtype=s.dtype, device=device))
    anchor, anchor_m = anchor_pose(s, ANT), anchor_pose(s_m, ANT)
    torch.testing.assert_close(states_to_anchor_frame(s_m, anchor_m, ANT), states_to_anchor_frame(s, anchor, ANT),
                               **TIGHT)
    torch.testing.assert_close(contacts_to_anchor_frame(points_m, normals_m, anchor_m),
                               contacts_to_anchor_frame(points, normals, anchor), **TIGHT)
    g, g_m = gravity_to_anchor_frame(anchor), gravity_to_anchor_frame(anchor_m)
    torch.testing.assert_close(g.norm(dim=-1), torch.ones_like(g[..., 0]), **TIGHT)
    assert ((g_m - g).norm(dim=-1) > 1e-3).all()


def test_gravity_in_identity_anchor_points_down(device):
    """With the identity anchor (world-frame robots) gravity is (0, 0, −1)."""
    cart = torch.zeros(3, 4, device=device)
    g = gravity_to_anchor_frame(anchor_pose(cart, CARTPOLE))
    torch.testing.assert_close(g, torch.tensor([0.0, 0.0, -1.0], device=device).expand(3, 3))


def test_integrate_target_is_differentiable(gen, device):
    """Gradients of integrate_target w.r.t. the target and the states are finite and non-zero."""
    s0 = floating_states((8, 3), gen, dtype=torch.float32, device=device).requires_grad_(True)
    target = compute_target(s0.detach(), step_floating(s0.detach(), gen), anchor_pose(s0.detach(), ANT), ANT)
    target = target.clone().requires_grad_(True)
    out = integrate_target(s0, target, anchor_pose(s0, ANT), ANT)
    weights = torch.randn(out.shape, generator=gen).to(device)
    (out * weights).sum().backward()
    for grad in (target.grad, s0.grad):
        assert torch.isfinite(grad).all()
        assert grad.abs().sum() > 0
    assert (target.grad[..., 3:7].abs().sum(dim=-1) > 0).all()   # the rotation delta is trained too


def test_integration_after_an_inference_mode_step_stays_differentiable():
    """The integrator steps under inference mode and the continuous-joint mask is cached: a differentiable rollout
    afterwards (nerd.diffsim) must still get gradients through the same integration."""
    s0 = torch.tensor([[0.5, 3.0, 0.1, 0.2]])
    target = torch.tensor([[0.01, 0.4, 0.0, 0.0]])
    with torch.inference_mode():
        integrate_target(s0, target, None, CARTPOLE)
    s0 = s0.clone().requires_grad_(True)
    integrate_target(s0, target, None, CARTPOLE).sum().backward()
    assert torch.equal(s0.grad, torch.ones_like(s0))
