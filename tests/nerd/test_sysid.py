"""System identification through the differentiable ground truth (nerd/sysid.py)."""

import torch

from nerd.diffsim import GroundTruthRollout
from nerd.envs import make_env
from nerd.envs.pendulum import PendulumWithContact
from nerd.hybrid import ContactForceAugmentation, JointTorqueAugmentation, hybrid_rollout
from nerd.sysid import descend, fit_parameter_scale, parallel_basin_hopping, scaled_parameter
from tests.nerd.test_diffsim import central_difference, relative_error, sliding_cube


def test_recovers_the_pendulum_link_length_from_20_percent_off():
    """Link 0's length (the second joint's pivot, 1.5 m) scaled by 0.9 in the reference; the fit starts at 1.08."""
    env = make_env("PendulumWithContact", 1, contact_config=0, use_graph=False)
    sim = GroundTruthRollout(env)
    start, torques = torch.tensor([[0.4, -0.8, 1.0, -1.5]]), torch.zeros(1, 6, 2)
    with torch.no_grad():
        reference = sim(start, torques, {"joint_X_p": scaled_parameter(sim, "joint_X_p", (1, 0), torch.tensor(0.9))})
    fit = fit_parameter_scale(sim, "joint_X_p", (1, 0), start, torques, reference, start=1.08, iterations=12)
    assert abs(fit.scale - 0.9) < 1e-3


def double_well(x: torch.Tensor) -> torch.Tensor:
    """(B, 1) -> (B,): minima near x = +0.96 (local) and x = -1.04 (global)."""
    return ((x**2 - 1.0) ** 2 + 0.3 * x).sum(dim=1)


def test_descent_keeps_rows_apart_and_basin_hopping_leaves_a_local_minimum():
    """Local descent from x = 1.2 stays in the right-hand basin; parallel basin hopping from the same start finds the
    global minimum. A batch of descents equals each row descended alone (Adam is elementwise), inside the box."""
    low, high = torch.tensor([-2.0]), torch.tensor([2.0])
    start = torch.tensor([[1.2], [-0.5], [1.9]])
    batch = descend(double_well, start, 60, 0.05, low, high)
    alone = torch.cat([descend(double_well, row[None], 60, 0.05, low, high).params for row in start])
    assert torch.allclose(batch.params, alone) and batch.evaluations == 61
    assert 0.9 < float(batch.params[0]) < 1.0 and float(batch.params[1]) < -1.0
    assert bool(((batch.params >= low) & (batch.params <= high)).all())
    hop = parallel_basin_hopping(double_well, start[:1], chains=4, hops=4, iterations=30, lr=0.05, sigma=1.0,
                                 low=low, high=high, generator=torch.Generator().manual_seed(0))
    assert -1.1 < float(hop.params[0]) < -1.0 and float(hop.loss[0]) < float(batch.loss[0])
    assert hop.evaluations == 4 * 31


def test_link_lengths_give_the_robot_at_its_own_lengths_and_their_gradient():
    """Lengths (1.5, 1.5) m give the robot's own parameters; the gradient of a 10-frame rollout with respect to the
    two lengths matches central differences."""
    env = make_env("PendulumWithContact", 1, contact_config=0, use_graph=False)
    sim = GroundTruthRollout(env)
    own = PendulumWithContact.link_length_parameters(torch.tensor([[1.5, 1.5]]), sim.parameter)
    for name, value in own.items():
        assert torch.allclose(value[0], sim.parameter(name))
    start, torques = torch.tensor([[0.4, -0.8, 1.0, -1.5]]), torch.zeros(1, 10, 2)
    weights = torch.randn(1, 10, 4, generator=torch.Generator().manual_seed(0))

    def loss(lengths):
        return (sim(start, torques, PendulumWithContact.link_length_parameters(lengths, sim.parameter)) * weights).sum()

    lengths = torch.tensor([[1.3, 1.7]], requires_grad=True)
    loss(lengths).backward()
    with torch.no_grad():
        step = torch.eye(2)[:, None, :] * 1e-2
        fd = torch.stack([(loss(lengths + h) - loss(lengths - h)) / 2e-2 for h in step])
    assert float((lengths.grad[0] - fd).norm() / fd.norm()) < 1e-3


def test_an_untrained_augmentation_changes_nothing_and_a_trained_one_learns_joint_friction():
    """The hook point: with a zero network the hybrid rollout is the analytical one. Trained through the tape on a
    reference with viscous joint friction, its weights get the trajectory's gradient: the rollout error falls 10x."""
    env = make_env("PendulumWithContact", 4, contact_config=0, use_graph=False)
    sim = GroundTruthRollout(env)
    start = env.sample_initial_states(4, torch.Generator().manual_seed(0)) * 0.3
    torques = torch.zeros(4, 4, 2)
    augmentation = JointTorqueAugmentation(4, 2, hidden=(16,), input_scale=torch.tensor([3.0, 3.0, 5.0, 5.0]),
                                           output_scale=50.0)
    with torch.no_grad():
        assert torch.equal(hybrid_rollout(sim, augmentation, start, torques), sim(start, torques))
        reference = sim(start, torques, {"joint_damping": torch.tensor([20.0, 10.0])})
    optimiser = torch.optim.Adam(augmentation.parameters(), lr=0.02)
    errors = []
    for _ in range(30):
        optimiser.zero_grad()
        loss = ((hybrid_rollout(sim, augmentation, start, torques) - reference) ** 2).mean()
        errors.append(float(loss.detach()))
        loss.backward()
        optimiser.step()
    assert errors[-1] < 0.1 * errors[0]


def test_contact_augmentation_is_a_no_op_untrained_and_the_same_in_the_environment_and_on_the_tape():
    """The hook inside the contact law: a zero output layer changes nothing; a trained one changes the motion
    identically in the environment's frames and on the tape, and its friction output's gradient matches central
    differences (< 2 %)."""
    env, start = sliding_cube()
    torch.manual_seed(0)
    augmentation = ContactForceAugmentation()
    plain, hybrid = GroundTruthRollout(env), GroundTruthRollout(env, augmentation)
    zeros = torch.zeros(2, 3, 0)
    with torch.no_grad():
        assert torch.equal(hybrid(start, zeros), plain(start, zeros))
        augmentation.w2.normal_(0.0, 0.01)
        augmentation.b2.normal_(0.0, 0.01)
        taped = hybrid(start, zeros)
    assert (taped - plain(start, zeros)).abs().max() > 1e-5
    env.contact_augmentation = augmentation
    env.set_states(start)
    stepped = []
    for _ in range(3):
        env.step(torch.zeros(2, 0))
        stepped.append(env.get_states())
    assert torch.equal(torch.stack(stepped, dim=1), taped)

    weights = torch.randn(2, 3, 13, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def loss(bias):
        with torch.no_grad():
            kept = augmentation.b2.clone()
            augmentation.b2.copy_(bias)
        try:
            return (hybrid(start, zeros).double() * weights).sum()
        finally:
            with torch.no_grad():
                augmentation.b2.copy_(kept)

    (hybrid(start, zeros).double() * weights).sum().backward()
    fd = central_difference(loss, augmentation.b2.detach(), 3e-3)
    assert relative_error(augmentation.b2.grad[1:], fd[1:]) < 2e-2
