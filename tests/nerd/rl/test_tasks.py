"""RL tasks: rewards, terminations and observations against hand-computed values; Ant reset states."""

import math

import pytest
import torch

from nerd.envs import make_env
from nerd.frames import quat_from_axis_angle, quat_rotate, quat_rotate_inv
from nerd.rl.tasks import TASKS, make_task


def cartpole(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_cartpole_reward_matches_the_formula():
    """reward = 5 − (wrap(θ)² + 0.05 x² + 0.1 θ̇² + 0.1 ẋ²), with θ wrapped into [−π, π)."""
    task = make_task("Cartpole", "swingup", 3)
    states = cartpole([0.0, 0.0, 0.0, 0.0], [1.0, 2 * math.pi + 0.5, -2.0, 3.0], [0.0, -0.5 - 4 * math.pi, 0.0, 0.0])
    # Row 2: 0.25 + 0.05 + 0.1 * 9 + 0.1 * 4 = 1.6; row 3: wrap(-0.5 - 4π) = -0.5 -> 0.25.
    torch.testing.assert_close(task.rewards(states, torch.zeros(3, 1)), torch.tensor([5.0, 3.4, 4.75]),
                               atol=1e-5, rtol=0)


def test_cartpole_terminates_outside_the_limits_only():
    """|x| > 4, |θ̇| > 10 or |ẋ| > 10 end the episode; the limits themselves and any angle do not."""
    task = make_task("Cartpole", "swingup", 6)
    states = cartpole([4.0, 3.0, 10.0, -10.0], [-4.01, 0, 0, 0], [0, 0, 10.01, 0], [0, 0, 0, -10.01],
                      [0, 50.0, 0, 0], [0, 0, -9.99, 9.99])
    assert task.terminations(states).tolist() == [False, True, True, True, False, False]


def test_cartpole_observation_wraps_the_pole_angle():
    """The observation is [x, wrap(θ), ẋ, θ̇]."""
    task = make_task("Cartpole", "swingup", 1)
    obs = task.observations(cartpole([0.5, 3 * math.pi - 0.25, -1.0, 2.0]), torch.zeros(1, 1))
    torch.testing.assert_close(obs, torch.tensor([[0.5, math.pi - 0.25, -1.0, 2.0]]), atol=1e-5, rtol=0)


def ant_state(quat=(0.0, 0.0, 0.0, 1.0), height=0.6, lin_vel=(0.0, 0.0, 0.0), ang_vel=(0.0, 0.0, 0.0)):
    """A world-frame Ant state (1, 29) with the given torso pose and velocities, hinges at 0.1 rad, rates 0.2."""
    pose = [torch.tensor([0.3, -0.2, height]), torch.as_tensor(quat, dtype=torch.float32)]
    q = torch.cat([*pose, torch.full((8,), 0.1)])
    qd = torch.cat([torch.tensor(lin_vel), torch.tensor(ang_vel), torch.full((8,), 0.2)])
    return torch.cat([q, qd]).unsqueeze(0)


def about(axis, angle):
    return quat_from_axis_angle(torch.tensor(axis), torch.tensor(angle)).tolist()


def test_ant_run_reward_of_constructed_states():
    """run = v_x + 0.1 u_z + h_x, no action cost: upright facing +x, yawed 90°, and pitched 90°."""
    task = make_task("Ant", "run", 1)
    v = (2.0, 0.5, -0.3)
    upright = task.rewards(ant_state(lin_vel=v), torch.full((1, 8), 0.5))
    torch.testing.assert_close(upright, torch.tensor([2.0 + 0.1 + 1.0]))
    # Yawed 90° about z: heading (0, 1, 0), so no heading bonus; actions cost nothing.
    yawed = task.rewards(ant_state(about((0.0, 0.0, 1.0), math.pi / 2), lin_vel=v), torch.full((1, 8), 3.0))
    torch.testing.assert_close(yawed, torch.tensor([2.0 + 0.1]), atol=1e-5, rtol=0)
    # Pitched 90° about y: up = (1, 0, 0), heading = (0, 0, -1): only the velocity counts.
    pitched = task.rewards(ant_state(about((0.0, 1.0, 0.0), math.pi / 2), lin_vel=v), torch.zeros(1, 8))
    torch.testing.assert_close(pitched, torch.tensor([2.0]), atol=1e-5, rtol=0)
    terms = task.reward_terms(ant_state(lin_vel=v), torch.zeros(1, 8))
    assert {k: round(t.item(), 4) for k, t in terms.items()} == {"velocity": 2.0, "up": 0.1, "heading": 1.0}


def test_ant_spin_rewards_of_constructed_states():
    """spin = ω_z + u_z; spin_track = 5 exp(−(ω_z − 5)² − 0.1 (ω_x² + ω_y²)) + 0.1 u_z."""
    spin = make_task("Ant", "spin", 1)
    torch.testing.assert_close(spin.rewards(ant_state(ang_vel=(0.0, 0.0, 3.0)), torch.zeros(1, 8)), torch.tensor([4.0]))
    upside_down = ant_state(about((1.0, 0.0, 0.0), math.pi), ang_vel=(0.0, 0.0, 3.0))
    torch.testing.assert_close(spin.rewards(upside_down, torch.zeros(1, 8)), torch.tensor([2.0]), atol=1e-5, rtol=0)

    track = make_task("Ant", "spin_track", 2)
    states = torch.cat([ant_state(ang_vel=(0.0, 0.0, 5.0)), ant_state(ang_vel=(1.0, 0.0, 4.0))])
    expected = torch.tensor([5.0 + 0.1, 5.0 * math.exp(-1.0 - 0.1) + 0.1])
    torch.testing.assert_close(track.rewards(states, torch.zeros(2, 8)), expected)


def test_ant_terminates_below_0_3_m():
    """An Ant episode fails when the torso is lower than 0.3 m; every Ant task lasts 500 steps."""
    task = make_task("Ant", "run", 3)
    states = torch.cat([ant_state(height=0.29), ant_state(height=0.31), ant_state(height=1.5)])
    assert task.terminations(states).tolist() == [True, False, False]
    assert {make_task("Ant", name, 1).episode_length for name in ("run", "spin", "spin_track")} == {500}


def test_ant_observation_is_the_releases_in_y_up_axes():
    """[h_x, q_c ⊗ q, v, ω (Y-up: (x, z, −y)), hinge q, hinge qd, u_z]; q_c ⊗ q rotates like the Y-up torso."""
    task = make_task("Ant", "spin_track", 1)
    quat = about((0.3, -0.5, 0.8), 0.7)
    state = ant_state(quat, height=0.7, lin_vel=(1.0, 2.0, 3.0), ang_vel=(-0.5, 0.25, 2.0))
    obs = task.observations(state, torch.zeros(1, 8))[0]
    assert obs.shape == (28,)
    upright = task.observations(ant_state(), torch.zeros(1, 8))[0]
    torch.testing.assert_close(upright[[0, 1, 2, 3, 4, 27]], torch.tensor([1.0, -0.70711, 0.0, 0.0, 0.70711, 1.0]))
    # The Y-up torso rotation maps any body vector to the Y-up image of its Z-up world direction.
    body = torch.tensor([0.2, -1.0, 0.4])
    world = quat_rotate(torch.tensor(quat), body)
    torch.testing.assert_close(quat_rotate(obs[1:5], body), torch.stack([world[0], world[2], -world[1]]))
    torch.testing.assert_close(obs[0], quat_rotate(torch.tensor(quat), torch.tensor([1.0, 0.0, 0.0]))[0])
    torch.testing.assert_close(obs[5:11], torch.tensor([1.0, 3.0, -2.0, -0.5, 2.0, -0.25]))
    torch.testing.assert_close(obs[11:19], torch.full((8,), 0.1))
    torch.testing.assert_close(obs[19:27], torch.full((8,), 0.2))
    torch.testing.assert_close(obs[27], quat_rotate(torch.tensor(quat), torch.tensor([0.0, 0.0, 1.0]))[2])


def test_ant_reset_is_the_releases():
    """Around the release's default pose: ±0.2/±0.2/±0.1 m, tilt ≤ 30°, hinges ±0.2 rad, small body-frame
    velocities, first hinge rate 0."""
    n = 512
    env = make_env("Ant", 1)
    states = env.sample_reset_states(n, torch.Generator().manual_seed(3))
    default = env.default_states(1)[0]
    torch.testing.assert_close(default[2:15], torch.tensor([1.0, 0, 0, 0, 1, 0, 1, 0, -1, 0, -1, 0, 1]))
    offset = states - default
    for dim, bound in enumerate((0.2, 0.2, 0.1)):
        assert offset[:, dim].abs().max() <= bound and offset[:, dim].abs().max() > 0.9 * bound
    torch.testing.assert_close(states[:, 3:7].norm(dim=1), torch.ones(n))
    tilt = 2 * torch.acos(states[:, 6].abs().clamp(max=1.0))
    assert tilt.max() <= math.pi / 6 + 1e-4 and tilt.max() > 0.9 * math.pi / 6
    assert offset[:, 7:15].abs().max() <= 0.2 and offset[:, 7:15].abs().max() > 0.19
    body_v = quat_rotate_inv(states[:, 3:7], states[:, 15:18])
    body_w = quat_rotate_inv(states[:, 3:7], states[:, 18:21])
    assert body_v.abs().max() <= 0.1 + 1e-5 and body_w.abs().max() <= 0.25 + 1e-5
    assert bool((states[:, 21] == 0).all()) and states[:, 22:29].abs().max() <= 0.25


def test_unknown_task_lists_the_valid_ones():
    """Asking for a task a robot does not have is a ValueError naming the valid (robot, task) pairs."""
    with pytest.raises(ValueError, match="valid tasks: .*Cartpole/swingup.*Ant/run"):
        make_task("Cartpole", "run", 1)
    assert ("Ant", "spin_track") in TASKS


def test_franka_reach_reward_of_constructed_states():
    """At the target the reward is the release's maximum 2/(2 + 1e-4); 0.1 m off it is −0.1 plus a tiny bonus."""
    from nerd.envs.franka import DEFAULT_Q, end_effector_position

    task = make_task("Franka", "reach", 2)
    states = torch.cat([torch.tensor(DEFAULT_Q), torch.zeros(7)]).repeat(2, 1)
    ee = end_effector_position(states[0, :7])
    task.targets[:] = ee
    task.targets[1, 2] += 0.1
    rewards = task.rewards(states, torch.zeros(2, 7))
    bonus = 1 / (math.exp(5.0) + 1e-4 + math.exp(-5.0)) + 1 / (math.exp(30.0) + 1e-4 + math.exp(-30.0))
    torch.testing.assert_close(rewards, torch.tensor([2 / (2 + 1e-4), -0.1 + bonus]))
    assert not task.terminations(states).any() and task.episode_length == 128


def test_franka_reach_observation_and_targets():
    """Observation [wrap(q), ee, target]; targets drawn in the release's box, redrawn for the reset envs only."""
    from nerd.envs.franka import end_effector_position

    task = make_task("Franka", "reach", 512)
    torch.testing.assert_close(task.targets, torch.tensor([0.0, 0.0, 0.5]).expand(512, 3))
    task.reset(torch.arange(511), torch.Generator().manual_seed(4))
    low, high = torch.tensor([0.3, -0.35, 0.05]), torch.tensor([0.7, 0.35, 0.45])
    assert ((task.targets[:511] >= low) & (task.targets[:511] <= high)).all()
    assert (task.targets[:511].amin(0) < low + 0.01).all() and (task.targets[:511].amax(0) > high - 0.01).all()
    torch.testing.assert_close(task.targets[511], torch.tensor([0.0, 0.0, 0.5]))
    states = torch.zeros(512, 14)
    states[:, 3] = 3 * math.pi / 2  # wraps to −π/2
    obs = task.observations(states, torch.zeros(512, 7))
    assert obs.shape == (512, 13)
    torch.testing.assert_close(obs[0, 3], torch.tensor(-math.pi / 2))
    torch.testing.assert_close(obs[:, 7:10], end_effector_position(states[:, :7]))
    torch.testing.assert_close(obs[:, 10:], task.targets)


def anymal_state(quat=(0.0, 0.0, 0.0, 1.0), height=0.6, v_com=(0.0, 0.0, 0.0), omega=(0.0, 0.0, 0.0)):
    """A world-frame ANYmal state (1, 37): base pose and COM/angular velocities, joints 0.1 rad, rates 0.2."""
    pose = [torch.tensor([0.3, -0.2, height]), torch.as_tensor(quat, dtype=torch.float32)]
    q = torch.cat([*pose, torch.full((12,), 0.1)])
    qd = torch.cat([torch.tensor(v_com), torch.tensor(omega), torch.full((12,), 0.2)])
    return torch.cat([q, qd]).unsqueeze(0)


def test_anymal_walk_rewards_of_constructed_states():
    """r = max(0, exp(−e_lin) + 0.5 exp(−ω_z²) − 2.5e-5 Σ τ²) on the base-origin velocity v_com − ω × R com_b;
    forward: e_lin = (v_x − 1)² + v_y²; side: v_x² + (v_y + 1)²."""
    from nerd.envs.anymal import BASE_COM

    forward, side = make_task("Anymal", "forward_walk", 1), make_task("Anymal", "side_walk", 1)
    torques = torch.full((1, 12), 10.0)  # Σ τ² = 1200 -> cost 0.03
    at_target = anymal_state(v_com=(1.0, 0.0, 0.0))
    torch.testing.assert_close(forward.rewards(at_target, torch.zeros(1, 12), torques), torch.tensor([1.5 - 0.03]))
    sideways = anymal_state(v_com=(0.0, -1.0, 0.0), omega=(0.0, 0.0, 1.0))
    # ω × com_b = (−com_y, com_x, 0) shifts the base-origin velocity off the COM's.
    v = torch.tensor([0.0, -1.0]) - torch.tensor([-BASE_COM[1], BASE_COM[0]])
    expected = math.exp(-(v[0] ** 2 + (v[1] + 1) ** 2)) + 0.5 * math.exp(-1.0) - 0.03
    torch.testing.assert_close(side.rewards(sideways, torch.zeros(1, 12), torques), torch.tensor([expected]))
    expected_forward = math.exp(-((v[0] - 1) ** 2 + v[1] ** 2)) + 0.5 * math.exp(-1.0) - 0.03
    torch.testing.assert_close(forward.rewards(sideways, torch.zeros(1, 12), torques), torch.tensor([expected_forward]))
    # A large torque cost is floored at 0, and the terms still sum to the reward.
    terms = forward.reward_terms(at_target, torch.zeros(1, 12), torch.full((1, 12), 100.0))
    assert terms["torque"].item() == pytest.approx(-3.0) and terms["floor"].item() == pytest.approx(1.5)
    assert forward.rewards(at_target, torch.zeros(1, 12), torch.full((1, 12), 100.0)).item() == 0.0
    assert {make_task("Anymal", t, 1).episode_length for t in ("forward_walk", "side_walk")} == {1000}


def test_anymal_terminates_on_stale_depths_and_base_height():
    """Base-capsule ends < 0.11 m, a knee end < 0.07 m (depths given), or the base origin < 0.4 m; feet never."""
    task = make_task("Anymal", "forward_walk", 5)
    depths = torch.tensor([0.7, 0.7] + [0.43, 0.43, 0.02] * 4).repeat(5, 1)
    depths[1, 1] = 0.105
    depths[2, 8] = 0.065
    depths[3, [4, 7, 10, 13]] = -0.01  # feet in the ground: fine
    states = torch.cat([anymal_state()] * 4 + [anymal_state(height=0.39)])
    assert task.terminations(states, depths).tolist() == [False, True, True, False, True]


def test_anymal_observation_is_the_releases_in_y_up_axes():
    """[p_z, q_c ⊗ q, v_Y, ω_Y, q, q̇, (R e_z)_z, (R e_x)_x], v the base-origin velocity, Y-up (x, z, −y)."""
    from nerd.envs.anymal import BASE_COM

    task = make_task("Anymal", "side_walk", 1)
    quat = about((0.3, -0.5, 0.8), 0.7)
    state = anymal_state(quat, height=0.65, v_com=(1.0, 2.0, 3.0), omega=(-0.5, 0.25, 2.0))
    obs = task.observations(state, torch.zeros(1, 12))[0]
    assert obs.shape == (37,)
    upright = task.observations(anymal_state(), torch.zeros(1, 12))[0]
    torch.testing.assert_close(upright[[0, 1, 2, 3, 4, 35, 36]],
                               torch.tensor([0.6, -0.70711, 0.0, 0.0, 0.70711, 1.0, 1.0]))
    q = torch.tensor(quat)
    body = torch.tensor([0.2, -1.0, 0.4])
    world = quat_rotate(q, body)
    torch.testing.assert_close(quat_rotate(obs[1:5], body), torch.stack([world[0], world[2], -world[1]]))
    w = torch.tensor([-0.5, 0.25, 2.0])
    v = torch.tensor([1.0, 2.0, 3.0]) - torch.linalg.cross(w, quat_rotate(q, torch.tensor(BASE_COM)))
    torch.testing.assert_close(obs[5:11], torch.stack([v[0], v[2], -v[1], w[0], w[2], -w[1]]))
    torch.testing.assert_close(obs[11:23], torch.full((12,), 0.1))
    torch.testing.assert_close(obs[23:35], torch.full((12,), 0.2))
    torch.testing.assert_close(obs[35], quat_rotate(q, torch.tensor([0.0, 0.0, 1.0]))[2])
    torch.testing.assert_close(obs[36], quat_rotate(q, torch.tensor([1.0, 0.0, 0.0]))[0])


def humanoid_state(quat=(0.0, 0.0, 0.0, 1.0), height=1.2, lin_vel=(0.0, 0.0, 0.0), ang_vel=(0.0, 0.0, 0.0),
                   hinges=None, rates=None):
    """A world-frame Humanoid state (1, 55): torso pose and velocities, hinges at 0 unless given, rates 0."""
    q = torch.cat([torch.tensor([0.5, -0.1, height]), torch.as_tensor(quat, dtype=torch.float32),
                   torch.zeros(21) if hinges is None else torch.as_tensor(hinges, dtype=torch.float32)])
    qd = torch.cat([torch.tensor(lin_vel), torch.tensor(ang_vel),
                    torch.zeros(21) if rates is None else torch.as_tensor(rates, dtype=torch.float32)])
    return torch.cat([q, qd]).unsqueeze(0)


def test_humanoid_run_reward_of_constructed_states():
    """IsaacGymEnvs' humanoid reward by hand: progress v_x, alive 2, upright 0.1, heading 0.5 min(1, h_x / 0.8),
    action, energy and joint-limit costs weighted by the motors' gears; −1 alone below 0.8 m."""
    from nerd.envs.humanoid import GEARS

    task = make_task("Humanoid", "run", 1)
    actions = torch.zeros(1, 21)
    upright = task.reward_terms(humanoid_state(lin_vel=(1.5, 0.3, 0.0)), actions)
    assert {k: round(v.item(), 5) for k, v in upright.items()} == {
        "progress": 1.5, "alive": 2.0, "up": 0.1, "heading": 0.5, "actions": 0.0, "energy": 0.0,
        "joint_limits": 0.0, "death": 0.0}
    # Yawed 30° (h_x = cos 30° = 0.866 > 0.8: full heading) and pitched 45° (u_z = h_x = 0.707: no upright bonus,
    # part of the heading's).
    yawed = task.reward_terms(humanoid_state(about((0.0, 0.0, 1.0), math.pi / 6)), actions)
    assert yawed["heading"].item() == pytest.approx(0.5) and yawed["up"].item() == pytest.approx(0.1)
    pitched = task.reward_terms(humanoid_state(about((0.0, 1.0, 0.0), math.pi / 4)), actions)
    assert pitched["up"].item() == 0.0 and pitched["heading"].item() == pytest.approx(0.5 * math.sqrt(0.5) / 0.8)
    yawed_60 = task.reward_terms(humanoid_state(about((0.0, 0.0, 1.0), math.pi / 3)), actions)
    assert yawed_60["heading"].item() == pytest.approx(0.5 * 0.5 / 0.8, abs=1e-6)
    # Costs: actions 0.5 on every hinge, rates 2 rad/s; the right knee (gear 90 of 135) 1° short of its upper
    # limit 2° in a range of 162°: s = (2·1° − (−160° + 2°)) / 162° = 160/162, 0.00765 beyond 0.98.
    hinges, rates = torch.zeros(21), torch.full((21,), 2.0)
    hinges[6] = math.radians(1.0)
    terms = task.reward_terms(humanoid_state(hinges=hinges, rates=rates), torch.full((1, 21), 0.5))
    ratio = torch.tensor(GEARS) / 135.0
    assert terms["actions"].item() == pytest.approx(-0.01 * 21 * 0.25)
    assert terms["energy"].item() == pytest.approx(-0.05 * (0.5 * 0.1 * 2.0 * ratio).sum().item(), rel=1e-5)
    s = (2 * 1.0 + 160.0 - 2.0) / 162.0
    assert terms["joint_limits"].item() == pytest.approx(-0.25 * (s - 0.98) / 0.02 * 90.0 / 135.0, rel=1e-4)
    total = task.rewards(humanoid_state(hinges=hinges, rates=rates), torch.full((1, 21), 0.5))
    torch.testing.assert_close(total, torch.stack(list(terms.values())).sum(dim=0))
    fallen = task.reward_terms(humanoid_state(height=0.7, lin_vel=(3.0, 0.0, 0.0)), torch.ones(1, 21))
    assert {k: v.item() for k, v in fallen.items() if v.item() != 0.0} == {"death": -1.0}
    states = torch.cat([humanoid_state(height=0.79), humanoid_state(height=0.81)])
    assert task.terminations(states).tolist() == [True, False]


def test_humanoid_observation_in_torso_axes_and_scaled_hinges():
    """z, v and 0.25 ω in torso axes, yaw, roll, u_z, h_x, hinges scaled to [−1, 1] by their limits, 0.1 θ̇ and
    the last actions, for a torso yawed 90°."""
    task = make_task("Humanoid", "run", 1)
    hinges = torch.zeros(21)
    hinges[6] = math.radians(-160.0)  # the right knee at its lower limit: s = −1
    rates = torch.arange(21, dtype=torch.float32)
    state = humanoid_state(about((0.0, 0.0, 1.0), math.pi / 2), lin_vel=(1.0, 0.0, 0.0), ang_vel=(0.0, 0.0, 2.0),
                           hinges=hinges, rates=rates)
    obs = task.observations(state, torch.full((1, 21), 0.3))[0]
    assert obs.shape == (74,) and obs[0].item() == pytest.approx(1.2)
    torch.testing.assert_close(obs[1:4], torch.tensor([0.0, -1.0, 0.0]), atol=1e-6, rtol=0)  # +x world = −y torso
    torch.testing.assert_close(obs[4:7], torch.tensor([0.0, 0.0, 0.5]), atol=1e-6, rtol=0)
    assert obs[7].item() == pytest.approx(math.pi / 2) and obs[8].item() == pytest.approx(0.0, abs=1e-6)
    assert obs[9].item() == pytest.approx(1.0) and obs[10].item() == pytest.approx(0.0, abs=1e-6)
    assert obs[11 + 6].item() == pytest.approx(-1.0)
    assert obs[11].item() == pytest.approx(0.0)  # abdomen_z at 0 in its symmetric range
    torch.testing.assert_close(obs[32:53], 0.1 * rates)
    torch.testing.assert_close(obs[53:], torch.full((21,), 0.3))
