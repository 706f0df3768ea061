"""Franka built in code: kinematics, energy without gravity, its two controllers, samplers, metric."""

import math

import pytest
import torch

from nerd.envs import make_env
from nerd.envs.control import joint_pd_torques
from nerd.envs.franka import DEFAULT_Q, EE_OFFSET, LINK_MASSES, PD_KD, PD_KP, TORQUE_LIMITS, end_effector_position
from nerd.errors import UserError
from nerd.evaluation import state_errors
from nerd.frames import quat_rotate


def kinetic_energy(env) -> torch.Tensor:
    """Σ ½ m |v_com|² + ½ ωᵀ I_world ω over the links, plus the rotor term ½ · armature · |q̇|², per env [J].

    Computed from the bodies' world velocities and the model's inertials, independently of Featherstone's
    joint-space mass matrix.
    """
    env.synchronize()
    n = env.num_envs
    body_q = torch.as_tensor(env.state_0.body_q.numpy()).view(n, 7, 7)
    body_qd = torch.as_tensor(env.state_0.body_qd.numpy()).view(n, 7, 6)
    mass = torch.as_tensor(env.model.body_mass.numpy()).view(n, 7)
    inertia = torch.as_tensor(env.model.body_inertia.numpy()).view(n, 7, 3, 3)
    quat = body_q[..., 3:7]
    rot = torch.stack([quat_rotate(quat, torch.eye(3)[i].expand(n, 7, 3)) for i in range(3)], dim=-1)
    v, w = body_qd[..., :3], body_qd[..., 3:]
    inertia_world = rot @ inertia @ rot.transpose(-1, -2)
    rotational = (w.unsqueeze(-2) @ inertia_world @ w.unsqueeze(-1)).squeeze(-1).squeeze(-1)
    qd = env.get_states()[:, 7:]
    return 0.5 * (mass * (v * v).sum(-1) + rotational).sum(-1) + 0.5 * 0.01 * (qd * qd).sum(-1)


def test_arm_follows_robots_md():
    """7 links of the release's masses (18.78 kg), 7 revolute dofs, gravity off, no contact candidates."""
    env = make_env("Franka", 1, use_graph=False)
    assert (env.bodies_per_env, env.dof_q, env.dof_qd, env.act_dim, env.contact_count) == (7, 7, 7, 7, 0)
    torch.testing.assert_close(torch.as_tensor(env.model.body_mass.numpy()), torch.tensor(LINK_MASSES))
    assert (env.model.gravity.numpy() == 0.0).all()
    assert env.continuous_q_indices == tuple(range(7))


def test_end_effector_forward_kinematics():
    """Hand-computed poses, and the simulator's own link-7 pose for random joint angles.

    q = 0: the arm stands straight up with link 7's z axis pointing down, so the EE is at
    x = 0.0825 − 0.0825 + 0.088, z = 0.333 + 0.316 + 0.384 − 0.21207. The default pose's EE is the release's
    (0.30663, 0, 0.48452).
    """
    torch.testing.assert_close(end_effector_position(torch.zeros(7)),
                               torch.tensor([0.088, 0.0, 0.333 + 0.316 + 0.384 - 0.21207]), atol=1e-6, rtol=0)
    torch.testing.assert_close(end_effector_position(torch.tensor(DEFAULT_Q)), torch.tensor([0.30663, 0.0, 0.48452]),
                               atol=2e-5, rtol=0)
    env = make_env("Franka", 16, use_graph=False)
    states = env.sample_initial_states(16, torch.Generator().manual_seed(1))
    env.set_states(states)
    link7 = env.get_body_q()[:, 6]
    from_sim = link7[:, :3] + quat_rotate(link7[:, 3:7], torch.tensor(EE_OFFSET).expand(16, 3))
    torch.testing.assert_close(env.end_effector_position(states), from_sim, atol=1e-5, rtol=0)


def test_kinetic_energy_is_conserved_without_gravity_and_torques():
    """Zero torques, gravity off: the arm's kinetic energy stays constant up to the integrator's drift.

    The ground truth is semi-implicit Euler at dt = 1/1080 s with the mass matrix refreshed once per 9-substep
    frame (the release's settings), which is not exactly energy-conserving for a configuration-dependent inertia.
    Measured over 64 states of the data sampler (|q̇| up to π rad/s, 1-35 J): the worst relative drift after 10
    frames is 1.4 % (0.3 % with the mass matrix refreshed every substep). The 3 % bound leaves a 2x margin while
    any force the release does not have fails it: gravity (≈ 20 J for 0.1 m of COM travel of the 18.8 kg arm),
    a limit spring or joint damping (the PD's −Kd·q̇ alone removes well over 3 % in 10 frames, checked below).
    A fresher mass matrix must drift less.
    """
    drift = {}
    for refresh in ("frame", "substep"):
        env = make_env("Franka", 64, mass_matrix_refresh=refresh)
        env.set_states(env.sample_initial_states(64, torch.Generator().manual_seed(0)))
        e0 = kinetic_energy(env)
        for _ in range(10):
            env.step_with_joint_act(torch.zeros(64, 7))
        drift[refresh] = ((kinetic_energy(env) - e0) / e0).abs().max().item()
    assert drift["frame"] < 0.03, drift
    assert drift["substep"] < drift["frame"], drift

    damped = make_env("Franka", 64, control_mode="position")
    damped.set_states(damped.sample_initial_states(64, torch.Generator().manual_seed(0)))
    e0 = kinetic_energy(damped)
    for _ in range(10):
        damped.step(torch.zeros(64, 7))  # zero action: τ = −Kd·q̇
    assert (kinetic_energy(damped) < 0.97 * e0).all()


def test_pd_holds_a_fixed_target():
    """The shared PD law with the release's Franka gains and clip, fed back every frame, brings every joint to a
    target 0.2 rad away and holds it: within 0.02 rad after 3 s (the lightly damped shoulder joints, ζ ≈ 0.1,
    settle slowest), and the error keeps shrinking."""
    env = make_env("Franka", 1)
    env.set_states(env.default_states(1))
    target = torch.tensor(DEFAULT_Q) + 0.2 * torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0])
    kp, kd, limits = torch.tensor(PD_KP), torch.tensor(PD_KD), torch.tensor(TORQUE_LIMITS)
    errors = []
    for frame in range(360):
        states = env.get_states()
        env.step_with_joint_act(joint_pd_torques(target, states[:, :7], states[:, 7:], kp, kd, limits))
        if frame % 120 == 119:
            errors.append((env.get_states()[0, :7] - target).abs().max().item())
    assert errors[-1] < 0.02 and errors[-1] < errors[0] / 3, errors


def test_controllers_follow_the_release():
    """Torque mode: clamp(a)·[87×4, 12×3]; position mode: clamp(Kp·0.03125·a − Kd·q̇, ±limits), 2 frames/action."""
    g = torch.Generator().manual_seed(2)
    actions = torch.rand(5, 7, generator=g) * 4 - 2
    limits = torch.tensor(TORQUE_LIMITS)
    torque = make_env("Franka", 5, control_mode="torque")
    assert torque.control_steps == 1
    torch.testing.assert_close(torque.compute_torques(actions), actions.clamp(-1, 1) * limits)
    position = make_env("Franka", 5, control_mode="position")
    assert position.control_steps == 2
    states = position.sample_initial_states(5, g)
    position.set_states(states)
    expected = torch.tensor(PD_KP) * 0.03125 * actions - torch.tensor(PD_KD) * states[:, 7:]
    expected = torch.maximum(torch.minimum(expected, limits), -limits)
    torch.testing.assert_close(position.compute_torques(actions), expected, atol=1e-4, rtol=1e-5)
    assert (expected.abs() == limits).any()  # the clip was exercised


def test_samplers_keep_the_release_ranges():
    """Data: q wrapped into [−π, π), q̇ in ±π, torques in ±[100×4, 20×3]; RL reset: default ± 0.125 at rest."""
    env = make_env("Franka", 1, use_graph=False)
    g = torch.Generator().manual_seed(3)
    init = env.sample_initial_states(4096, g)
    assert (init[:, :7] >= -math.pi).all() and (init[:, :7] < math.pi).all()
    assert init[:, :7].min() < -3.0 and init[:, :7].max() > 3.0  # wrapped from ±10, not squeezed
    assert (init[:, 7:].abs() <= math.pi).all() and init[:, 7:].abs().max() > 3.0
    torques = env.sample_random_torques(4096, g)
    scale = torch.tensor([100.0] * 4 + [20.0] * 3)
    assert (torques.abs() <= scale).all() and (torques.abs().amax(0) > 0.95 * scale).all()
    reset = env.sample_reset_states(1024, g)
    assert ((reset[:, :7] - torch.tensor(DEFAULT_Q)).abs() <= 0.125 + 1e-6).all() and (reset[:, 7:] == 0).all()


def test_end_effector_passive_metric():
    """The passive metric ``end_effector_position_error`` is the FK distance between the two states [m]."""
    env = make_env("Franka", 1, use_graph=False)
    gt = env.default_states(2)
    pred = gt.clone()
    pred[1, 0] += math.pi / 2  # joint 1 turns the EE (0.30663 m from the axis) by 90 degrees
    errors = state_errors(gt, pred, env)
    torch.testing.assert_close(errors["end_effector_position_error"], torch.tensor([0.0, 0.30663 * math.sqrt(2)]),
                               atol=2e-5, rtol=0)


def test_control_mode_errors():
    """An unknown control mode, or a control mode for a robot with one controller, is a one-line error."""
    with pytest.raises(UserError, match="valid: torque, position"):
        make_env("Franka", 1, control_mode="velocity")
    with pytest.raises(UserError, match="applies to Anymal, Franka only"):
        make_env("Cartpole", 1, control_mode="position")
