"""Cartpole physics against closed-form quantities and an independent integration of its equations of motion."""

import numpy as np
import pytest
import torch

from nerd.envs import cartpole, make_env

M = 50.0  # cart [kg]
m = 2.5  # pole [kg]
L = 0.5  # hinge to pole centre [m]
I_C = 2.5 * (0.05**2 + 1.0**2) / 12.0  # pole inertia about its centre, around the hinge axis [kg m^2]
A = cartpole.ARMATURE
G = 9.81


def energy(states: torch.Tensor) -> torch.Tensor:
    """Total energy of the Lagrangian with joint armature: T + V, V = m g l cos(theta)."""
    x, th, xd, thd = states.double().unbind(-1)
    kinetic = 0.5 * (M + m + A) * xd**2 + m * L * xd * thd * torch.cos(th) + 0.5 * (I_C + m * L**2 + A) * thd**2
    return kinetic + m * G * L * torch.cos(th)


def reference_rollout(y0: np.ndarray, frames: int, frame_dt: float) -> np.ndarray:
    """RK4 at 100 steps per frame of  M(q) qdd = [m l sin(th) thd^2, m g l sin(th)]  (no rail contact)."""

    def f(y):
        _, th, xd, thd = y
        mass = np.array([[M + m + A, m * L * np.cos(th)], [m * L * np.cos(th), I_C + m * L**2 + A]])
        acc = np.linalg.solve(mass, [m * L * np.sin(th) * thd**2, m * G * L * np.sin(th)])
        return np.array([xd, thd, acc[0], acc[1]])

    y, h, out = y0.astype(np.float64), frame_dt / 100, []
    for _ in range(frames):
        for _ in range(100):
            k1 = f(y)
            k2 = f(y + h / 2 * k1)
            k3 = f(y + h / 2 * k2)
            k4 = f(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(y.copy())
    return np.array(out)


@pytest.fixture(scope="module")
def rollout():
    """Two seconds of unforced motion from theta = 0.5 rad at rest.

    The mass matrix is refreshed every substep, so the integration is first order in the substep dt that the
    tolerances below are tied to; the release's once-per-frame refresh is checked against its own reference in
    :func:`test_mass_matrix_refresh_matches_semi_implicit_reference`.
    """
    env = make_env("Cartpole", 1, mass_matrix_refresh="substep")
    env.set_states(torch.tensor([[0.0, 0.5, 0.0, 0.0]]))
    states = [env.get_states()[0]]
    for _ in range(120):
        env.step_with_joint_act(torch.zeros(1, 2))
        states.append(env.get_states()[0])
    return env, torch.stack(states)


def test_masses_and_inertia_follow_the_release_geometry(rollout):
    """Cart 50 kg, pole 2.5 kg with 0.2089 kg m^2 about its centre (boxes at 1000 kg/m^3)."""
    env, _ = rollout
    np.testing.assert_allclose(env.model.body_mass.numpy()[:2], [M, m], rtol=1e-5)
    np.testing.assert_allclose(env.model.body_inertia.numpy()[1][0, 0], I_C, rtol=1e-4)


def test_zero_torque_conserves_energy(rollout):
    """Symplectic Euler keeps the energy error bounded by ~ dt * |theta_dot|max * m g l, with no drift."""
    env, states = rollout
    dE = (energy(states) - energy(states[:1])).abs()
    dt = env.sim_dt
    tolerance = dt * states[:, 3].abs().max().item() * m * G * L
    assert dE.max().item() < tolerance, (dE.max().item(), tolerance)
    # The pole really swings (the test is not vacuous).
    assert states[:, 1].abs().max() > 1.0


def test_matches_independent_integration(rollout):
    """Newton's Featherstone rollout tracks RK4 on the Lagrangian to first order in dt over 2 s."""
    env, states = rollout
    ref = reference_rollout(np.array([0.0, 0.5, 0.0, 0.0]), 120, env.frame_dt)
    err = np.abs(states[1:].numpy() - ref)
    assert err[:, 0].max() < 0.01, err[:, 0].max()  # cart [m]
    assert err[:, 1].max() < 0.03, err[:, 1].max()  # pole [rad]


def test_pole_falls_towards_plus_x_and_cart_recoils():
    """Positive theta tilts the tip towards +x: from theta = 0.1 the pole falls to +x, the cart moves to -x."""
    env = make_env("Cartpole", 1)
    env.set_states(torch.tensor([[0.0, 0.1, 0.0, 0.0]]))
    for _ in range(30):
        env.step(torch.zeros(1, 1))
    x, th, xd, thd = env.get_states()[0]
    assert th > 0.1 and thd > 0 and x < 0 and xd < 0


def test_action_is_clamped_and_scaled():
    """Cart force = clamp(a, -1, 1) * 1500 N; the pole is unactuated."""
    env = make_env("Cartpole", 2)
    torques = env.compute_torques(torch.tensor([[0.5], [-3.0]]))
    assert torch.equal(torques, torch.tensor([[750.0, 0.0], [-1500.0, 0.0]]))


def semi_implicit_rollout(y0: np.ndarray, frames: int, frame_dt: float, substeps: int, refresh_every: int
                          ) -> np.ndarray:
    """Semi-implicit Euler of the Lagrangian with M(q) rebuilt every ``refresh_every`` substeps (float64).

    qd += dt * M(q_k)^-1 [m l sin(th) thd^2, m g l sin(th)];  q += dt * qd, where q_k is the state at the last
    refresh. This is Featherstone's integration with ``update_mass_matrix_interval = refresh_every``.
    """
    q, qd, dt, out = y0[:2].astype(np.float64), y0[2:].astype(np.float64), frame_dt / substeps, []
    for k in range(frames * substeps):
        if k % refresh_every == 0:
            c = np.cos(q[1])
            mass = np.array([[M + m + A, m * L * c], [m * L * c, I_C + m * L**2 + A]])
        qdd = np.linalg.solve(mass, [m * L * np.sin(q[1]) * qd[1] ** 2, m * G * L * np.sin(q[1])])
        qd = qd + dt * qdd
        q = q + dt * qd
        if (k + 1) % substeps == 0:
            out.append(np.concatenate([q, qd]))
    return np.array(out)


@pytest.mark.parametrize("refresh", ["frame", "substep"])
def test_mass_matrix_refresh_matches_semi_implicit_reference(refresh):
    """Both refresh rules reproduce semi-implicit Euler with the same rule, and differ from the other rule."""
    y0 = np.array([0.0, 1.5, 0.5, -2.0])
    env = make_env("Cartpole", 1, mass_matrix_refresh=refresh)
    env.set_states(torch.tensor(y0, dtype=torch.float32).unsqueeze(0))
    states = []
    for _ in range(120):
        env.step_with_joint_act(torch.zeros(1, 2))
        states.append(env.get_states()[0].numpy())
    states = np.array(states)
    same, other = (env.sim_substeps, 1) if refresh == "frame" else (1, env.sim_substeps)
    err_same = np.abs(states - semi_implicit_rollout(y0, 120, env.frame_dt, env.sim_substeps, same)).max(axis=0)
    err_other = np.abs(states - semi_implicit_rollout(y0, 120, env.frame_dt, env.sim_substeps, other)).max(axis=0)
    # Measured: <= 2e-5 against the same rule (float32 round-off), >= 4e-3 against the other rule.
    assert err_same.max() < 2e-4, err_same
    assert err_other.max() > 20 * err_same.max(), (err_same, err_other)


def test_release_mass_matrix_refresh_is_the_default():
    """Every robot refreshes Featherstone's mass matrix once per frame unless asked otherwise (release setting)."""
    env = make_env("Cartpole", 1)
    assert env.mass_matrix_refresh == "frame"
    assert env.solver.update_mass_matrix_interval == env.sim_substeps
    assert make_env("Cartpole", 1, mass_matrix_refresh="substep").solver.update_mass_matrix_interval == 1
    with pytest.raises(ValueError, match="mass-matrix refresh"):
        make_env("Cartpole", 1, mass_matrix_refresh="sometimes")


def test_limit_starts_bounce_slowly_off_the_rail_stop():
    """--initial-states limits: the cart starts 3.2-4 m out, at most 1.5 m/s towards the nearer stop; in two
    seconds of passive motion most carts meet the 1e4 N/m stop, shallowly (a 1.5 m/s bounce of the 52.5 kg cart
    reaches 0.11 m), and leave it moving back towards the centre."""
    n = 128
    env = make_env("Cartpole", n)
    start = env.sample_limit_states(n, torch.Generator().manual_seed(0))
    side = start[:, 0].sign()
    assert ((start[:, 0].abs() >= 3.2) & (start[:, 0].abs() <= cartpole.RAIL_LIMIT)).all()
    assert ((side * start[:, 2] >= -0.5) & (side * start[:, 2] <= 1.5)).all()
    assert (start[:, 1].abs() <= torch.pi).all() and (start[:, 3].abs() <= 1.0).all()
    assert (side > 0).any() and (side < 0).any()
    env.set_states(start)
    depths = []
    for _ in range(120):
        env.step(torch.zeros(n, 1))
        depths.append(side * env.get_states()[:, 0] - cartpole.RAIL_LIMIT)
    depth = torch.stack(depths)
    hit = (depth > 0).any(0)
    assert hit.float().mean() > 0.5
    assert depth.max() < 0.15
    assert (side * env.get_states()[:, 2] < 0)[hit].float().mean() > 0.9


def test_mirror_joint_signs_are_a_symmetry_of_the_ground_truth():
    """The mirror image of a rollout (x, theta, their rates and the cart force negated) is the rollout of the
    mirrored start and forces, through a rail-stop bounce too; negating x alone is not a symmetry (the test can
    fail)."""
    n, frames = 4, 120
    gen = torch.Generator().manual_seed(3)
    start = torch.tensor([[3.7, 0.4, 3.0, -1.0], [0.5, 3.0, -2.0, 4.0], [-1.0, -0.2, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    torques = [make_env("Cartpole", 1).sample_random_torques(n, gen) * 0.2 for _ in range(frames)]

    def run(state_signs: torch.Tensor, torque_signs: torch.Tensor) -> torch.Tensor:
        env = make_env("Cartpole", n)
        env.set_states(start * state_signs)
        states = []
        for tau in torques:
            env.step_with_joint_act(tau * torque_signs)
            states.append(env.get_states() * state_signs)
        return torch.stack(states)

    signs = torch.tensor(cartpole.Cartpole.mirror_joint_signs)
    plain = run(torch.ones(4), torch.ones(2))
    assert plain[:, 0, 0].max() > cartpole.RAIL_LIMIT  # the first env bounces off the stop
    torch.testing.assert_close(run(torch.cat([signs, signs]), signs), plain, atol=1e-4, rtol=1e-4)
    cart_only = torch.tensor([-1.0, 1.0])
    assert (run(torch.cat([cart_only, cart_only]), cart_only) - plain).abs().max() > 0.1
