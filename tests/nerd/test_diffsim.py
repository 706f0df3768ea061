"""Differentiable rollouts (nerd/diffsim.py): gradients against central finite differences, and bad input."""

import pytest
import torch

from nerd.diffsim import GroundTruthRollout, rollout_ground_truth, rollout_neural
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.features import signature_of_env
from nerd.models.nerd_model import NeRDModel
from tests.helpers import TINY

FRAMES = 3


def central_difference(loss, x: torch.Tensor, step: float) -> torch.Tensor:
    """Central differences of the scalar ``loss(x)`` in every entry of ``x``, with an absolute ``step``."""
    grad = torch.zeros(x.shape, dtype=torch.float64)
    for i in range(x.numel()):
        up, down = x.detach().clone(), x.detach().clone()
        up.view(-1)[i] += step
        down.view(-1)[i] -= step
        with torch.no_grad():
            grad.view(-1)[i] = (float(loss(up)) - float(loss(down))) / (2 * step)
    return grad


def relative_error(grad: torch.Tensor, reference: torch.Tensor) -> float:
    return float((grad.double() - reference).norm() / reference.norm())


@pytest.fixture(scope="module")
def cartpole():
    env = make_env("Cartpole", 2, use_graph=False)
    return env, GroundTruthRollout(env)


@pytest.fixture(scope="module")
def pendulum():
    # Ground configuration 0: the plane 15.5 m down, never touched.
    env = make_env("PendulumWithContact", 1, contact_config=0, use_graph=False)
    return env, GroundTruthRollout(env)


def test_ground_truth_matches_the_environment(cartpole):
    env, sim = cartpole
    start = torch.tensor([[0.5, 0.3, 0.2, -0.4], [-1.0, 2.5, -0.3, 1.0]])
    torques = torch.zeros(2, FRAMES, 2)
    torques[..., 0] = torch.tensor([[100.0, -50.0, 20.0], [0.0, 300.0, -80.0]])
    env.set_states(start)
    expected = []
    for k in range(FRAMES):
        env.step_with_joint_act(torques[:, k])
        expected.append(env.get_states())
    assert torch.equal(sim(start, torques), torch.stack(expected, dim=1))


def test_ground_truth_gradients_cartpole(cartpole):
    """float32 engine: steps of 1e-2 (states) and 1 N (forces); tape and differences agree to < 1e-3."""
    env, sim = cartpole
    g = torch.Generator().manual_seed(0)
    start = env.sample_reset_states(2, g)
    torques = torch.cat([200.0 * torch.randn(2, FRAMES, 1, generator=g), torch.zeros(2, FRAMES, 1)], dim=2)
    weights = torch.randn(2, FRAMES, 4, generator=g, dtype=torch.float64)

    def loss(s, t):
        return (sim(s, t).double() * weights).sum()

    s, t = start.clone().requires_grad_(), torques.clone().requires_grad_()
    loss(s, t).backward()
    assert relative_error(s.grad, central_difference(lambda x: loss(x, torques), start, 1e-2)) < 1e-3
    assert relative_error(t.grad[..., 0], central_difference(lambda x: loss(start, x), torques, 1.0)[..., 0]) < 1e-3


def test_ground_truth_gradients_pendulum_with_parameters(pendulum):
    env, sim = pendulum
    start = torch.tensor([[0.4, -0.8, 1.0, -1.5]])
    torques = torch.tensor([[[300.0, -200.0], [100.0, 50.0], [-250.0, 0.0]]])
    weights = torch.randn(1, FRAMES, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mass, pivot, armature = (sim.parameter(k) for k in ("body_mass", "joint_X_p", "joint_armature"))

    def loss(s, m=mass, p=pivot, a=armature):
        params = {"body_mass": m, "joint_X_p": p, "joint_armature": a}
        return (sim(s, torques, params).double() * weights).sum()

    leaves = [x.clone().requires_grad_() for x in (start, mass, pivot, armature)]
    loss(*leaves).backward()
    s, m, p, a = (x.grad for x in leaves)
    assert relative_error(s, central_difference(loss, start, 1e-2)) < 1e-3
    assert relative_error(m, central_difference(lambda x: loss(start, m=x), mass, 0.1)) < 1e-3
    # The second joint's pivot along link 0: link 0's length (1.5 m).
    fd_pivot = central_difference(lambda x: loss(start, p=torch.cat([pivot[:1], torch.cat(
        [x.view(1), pivot[1, 1:]])[None]])), pivot[1, 0], 1e-2)
    assert relative_error(p[1, 0], fd_pivot) < 1e-3
    assert relative_error(a, central_difference(lambda x: loss(start, a=x), armature, 1e-2)) < 1e-3


def test_ground_truth_gradient_of_joint_damping(pendulum):
    """Viscous joint friction (zero on the robot) slows the joints, and its gradient matches central differences."""
    env, sim = pendulum
    start, torques = torch.tensor([[0.4, -0.8, 1.0, -1.5]]), torch.zeros(1, FRAMES, 2)
    weights = torch.randn(1, FRAMES, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert torch.equal(sim.parameter("joint_damping"), torch.zeros(2))

    def loss(d):
        return (sim(start, torques, {"joint_damping": d}).double() * weights).sum()

    damping = torch.tensor([20.0, 10.0], requires_grad=True)
    loss(damping).backward()
    assert relative_error(damping.grad, central_difference(loss, damping.detach(), 1.0)) < 1e-3
    with torch.no_grad():
        free, damped = sim(start, torques), sim(start, torques, {"joint_damping": damping})
    assert bool((damped[0, -1, 2:].abs() < free[0, -1, 2:].abs()).all())


def sliding_cube():
    """Two CubeToss cubes (Huber friction, mass matrix every substep) 0.5 mm into the ground, sliding (one also
    spinning): contact all along, no impact."""
    from nerd.envs.cube_toss import HALF_EXTENT

    start = torch.zeros(2, 13)
    start[:, 2] = HALF_EXTENT - 5e-4
    start[:, 6] = 1.0
    start[0, 7] = 1.0
    start[1, 7:9] = torch.tensor([0.5, 0.3])
    start[1, 12] = 2.0
    return make_env("CubeToss", 2, use_graph=False), start


def test_ground_truth_through_huber_contacts():
    """The Huber law on the tape: the rollout is the environment's, and the friction coefficient's gradient
    matches central differences (< 2 %). Gradients of the normal law (ke, kd) through a 1e4 N/m spring are at the
    level of float32 differences' noise; nothing asserts on them."""
    env, start = sliding_cube()
    sim = GroundTruthRollout(env)
    env.set_states(start)
    expected = []
    for _ in range(FRAMES):
        env.step(torch.zeros(2, 0))
        expected.append(env.get_states())
    assert torch.equal(sim(start, torch.zeros(2, FRAMES, 0)), torch.stack(expected, dim=1))
    weights = torch.randn(2, FRAMES, 13, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mu = sim.parameter("shape_material_mu")

    def loss(m):
        return (sim(start, torch.zeros(2, FRAMES, 0), {"shape_material_mu": m}).double() * weights).sum()

    leaf = mu.clone().requires_grad_()
    loss(leaf).backward()
    assert relative_error(leaf.grad, central_difference(loss, mu, 1e-3)) < 2e-2


def test_huber_gradients_stay_finite_for_a_cube_almost_at_rest():
    """A corner sliding at 1e-10 m/s (a Huber norm of 5e-21): the friction force is the viscous kf·vt, and no
    adjoint divides by the squared norm (float32 underflow made them NaN)."""
    env, start = sliding_cube()
    start[:, 7:] = 0.0
    start[:, 7] = 1e-10
    sim = GroundTruthRollout(env)
    values = {k: sim.parameter(k).requires_grad_() for k in ("shape_material_ke", "shape_material_kd")}
    leaf = start.clone().requires_grad_()
    sim(leaf, torch.zeros(2, FRAMES, 0), values).sum().backward()
    assert all(torch.isfinite(g).all() for g in (leaf.grad, *(v.grad for v in values.values())))


def test_parameter_broadcast_and_per_env(cartpole):
    """A per-env parameter value (N, ...) gets a per-env gradient; a shared one gets their sum."""
    env, sim = cartpole
    start = torch.tensor([[0.5, 0.3, 0.2, -0.4], [0.5, 0.3, 0.2, -0.4]])
    torques = torch.zeros(2, 2, 2)
    torques[..., 0] = 100.0
    shared = sim.parameter("body_mass").requires_grad_()
    sim(start, torques, {"body_mass": shared}).sum().backward()
    per_env = sim.parameter("body_mass").expand(2, -1).clone().requires_grad_()
    sim(start, torques, {"body_mass": per_env}).sum().backward()
    torch.testing.assert_close(per_env.grad[0], per_env.grad[1])
    torch.testing.assert_close(shared.grad, per_env.grad.sum(0))


def tiny_model(env, dtype=torch.float32):
    torch.manual_seed(0)
    sig = signature_of_env(env)
    return NeRDModel(sig.input_groups, sig.target_dim, TINY).to(dtype)


def test_neural_gradients_cartpole_float64(cartpole):
    env, _ = cartpole
    model = tiny_model(env, torch.float64)
    g = torch.Generator().manual_seed(0)
    start = env.sample_reset_states(2, g).double()
    torques = torch.randn(2, FRAMES, 2, generator=g, dtype=torch.float64)
    weights = torch.randn(2, FRAMES, 4, generator=g, dtype=torch.float64)

    def loss(s, t):
        return (rollout_neural(model, env, s, t, history_length=2) * weights).sum()

    s, t = start.clone().requires_grad_(), torques.clone().requires_grad_()
    loss(s, t).backward()
    assert relative_error(s.grad, central_difference(lambda x: loss(x, torques), start, 1e-6)) < 1e-6
    assert relative_error(t.grad, central_difference(lambda x: loss(start, x), torques, 1e-6)) < 1e-6
    # Weights: three entries of the first matrix.
    weight = next(p for p in model.parameters() if p.dim() == 2)
    row = weight[0, :3]

    def loss_of_row(x):
        saved = row.detach().clone()
        with torch.no_grad():
            weight[0, :3] = x
        value = loss(start, torques)
        with torch.no_grad():
            weight[0, :3] = saved
        return value

    assert relative_error(weight.grad[0, :3], central_difference(loss_of_row, row, 1e-6)) < 1e-6


def test_neural_gradients_pendulum_body_frame(pendulum):
    """The pendulum's body-frame anchor and contact features go through Warp's forward kinematics (float32)."""
    env, _ = pendulum
    model = tiny_model(env, torch.float64)
    start = torch.tensor([[0.4, -0.8, 1.0, -1.5]], dtype=torch.float64)
    torques = 0.3 * torch.ones(1, 2, 2, dtype=torch.float64)

    def loss(s):
        return rollout_neural(model, env, s, torques, history_length=2)[:, -1].sum()

    s = start.clone().requires_grad_()
    loss(s).backward()
    assert relative_error(s.grad, central_difference(loss, start, 1e-3)) < 1e-3


def test_neural_contact_features_match_the_environment():
    from nerd.diffsim import _fk_model, _ForwardKinematics, _plane_contacts

    env = make_env("PendulumWithContact", 2, contact_config=2, use_graph=False)
    states = torch.tensor([[0.4, -0.8, 1.0, -1.5], [1.2, 0.3, 0.0, 0.0]])
    env.set_states(states)
    ours = _plane_contacts(env, _ForwardKinematics.apply(_fk_model(env), env, states))
    for key, value in env.get_contacts().items():
        torch.testing.assert_close(ours[key], value, atol=1e-5, rtol=1e-5)


def test_bad_input_is_one_line(cartpole):
    env, sim = cartpole
    start, torques = torch.zeros(2, 4), torch.zeros(2, 1, 2)
    with pytest.raises(UserError, match="no differentiable parameter 'link_length'"):
        sim(start, torques, {"link_length": torch.ones(1)})
    with pytest.raises(UserError, match="must have shape"):
        sim(start, torques, {"body_mass": torch.ones(3)})
    with pytest.raises(UserError, match="torques must have shape"):
        sim(start, torch.zeros(2, 1, 1))
    with pytest.raises(UserError, match="featherstone"):
        rollout_ground_truth(make_env("Cartpole", 1, solver="xpbd", use_graph=False), start[:1], torques[:1])
