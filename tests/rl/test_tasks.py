"""RL tasks: rewards, terminations and observations against hand-computed values; Ant reset states."""

import math

import pytest
import torch

from nerd.envs import make_env
from nerd.envs.ant import hinge_limits
from nerd.frames import quat_from_axis_angle
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
    """run = v_x + 0.1 u_z + h_x − 0.005 |a|²: upright facing +x, yawed 90°, and pitched 90°."""
    task = make_task("Ant", "run", 1)
    v = (2.0, 0.5, -0.3)
    upright = task.rewards(ant_state(lin_vel=v), torch.full((1, 8), 0.5))
    torch.testing.assert_close(upright, torch.tensor([2.0 + 0.1 + 1.0 - 0.005 * 8 * 0.25]))
    # Yawed 90° about z: heading (0, 1, 0), so no heading bonus; actions beyond ±1 are clamped in the cost.
    yawed = task.rewards(ant_state(about((0.0, 0.0, 1.0), math.pi / 2), lin_vel=v), torch.full((1, 8), 3.0))
    torch.testing.assert_close(yawed, torch.tensor([2.0 + 0.1 - 0.005 * 8]), atol=1e-5, rtol=0)
    # Pitched 90° about y: up = (1, 0, 0), heading = (0, 0, -1): only the velocity counts.
    pitched = task.rewards(ant_state(about((0.0, 1.0, 0.0), math.pi / 2), lin_vel=v), torch.zeros(1, 8))
    torch.testing.assert_close(pitched, torch.tensor([2.0]), atol=1e-5, rtol=0)


def test_ant_spin_rewards_of_constructed_states():
    """spin = ω_z + u_z − cost; spin-tracking = 5 exp(−(ω_z − ω*)² − 0.1 (ω_x² + ω_y²)) + 0.1 u_z."""
    spin = make_task("Ant", "spin", 1)
    torch.testing.assert_close(spin.rewards(ant_state(ang_vel=(0.0, 0.0, 3.0)), torch.zeros(1, 8)), torch.tensor([4.0]))
    upside_down = ant_state(about((1.0, 0.0, 0.0), math.pi), ang_vel=(0.0, 0.0, 3.0))
    torch.testing.assert_close(spin.rewards(upside_down, torch.zeros(1, 8)), torch.tensor([2.0]), atol=1e-5, rtol=0)

    track = make_task("Ant", "spin_tracking", 2)
    track.target_yaw_rate[:] = torch.tensor([2.0, -1.0])
    states = torch.cat([ant_state(ang_vel=(0.0, 0.0, 2.0)), ant_state(ang_vel=(1.0, 0.0, 0.0))])
    expected = torch.tensor([5.0 + 0.1, 5.0 * math.exp(-1.0 - 0.1) + 0.1])
    torch.testing.assert_close(track.rewards(states, torch.zeros(2, 8)), expected)


def test_ant_terminates_below_0_3_m():
    """An Ant episode fails when the torso is lower than 0.3 m."""
    task = make_task("Ant", "run", 3)
    states = torch.cat([ant_state(height=0.29), ant_state(height=0.31), ant_state(height=1.5)])
    assert task.terminations(states).tolist() == [True, False, False]


def test_ant_observation_layout():
    """[p_z, u, h, Rᵀv, Rᵀω, hinge q, hinge qd, last actions (, ω*)]; velocities in the torso's axes."""
    task = make_task("Ant", "spin_tracking", 1)
    task.target_yaw_rate[:] = 1.5
    state = ant_state(about((0.0, 0.0, 1.0), math.pi / 2), height=0.7, lin_vel=(1.0, 0.0, 0.0), ang_vel=(0.0, 0.0, 2.0))
    actions = torch.linspace(-1, 1, 8).unsqueeze(0)
    obs = task.observations(state, actions)[0]
    assert obs.shape == (38,) and make_task("Ant", "run", 1).observations(state, actions).shape == (1, 37)
    expected_head = [0.7, 0, 0, 1, 0, 1, 0, 0, -1, 0, 0, 0, 2]  # yawed 90°: world +x is the body's −y
    torch.testing.assert_close(obs[:13], torch.tensor(expected_head, dtype=torch.float32), atol=1e-5, rtol=0)
    torch.testing.assert_close(obs[13:21], torch.full((8,), 0.1))
    torch.testing.assert_close(obs[21:29], torch.full((8,), 0.2))
    torch.testing.assert_close(obs[29:37], actions[0])
    assert obs[37] == 1.5


def test_spin_tracking_redraws_targets_of_reset_envs_only():
    """reset(env_ids) draws new target yaw rates in [−5, 5] for those envs and keeps the others'."""
    task = make_task("Ant", "spin_tracking", 4)
    task.target_yaw_rate[:] = 9.0
    task.reset(torch.tensor([1, 3]), torch.Generator().manual_seed(0))
    targets = task.target_yaw_rate
    assert targets[0] == 9.0 and targets[2] == 9.0
    assert bool(((targets[[1, 3]] >= -5) & (targets[[1, 3]] <= 5)).all()) and targets[1] != targets[3]


def test_ant_reset_states_are_valid_and_above_ground():
    """Ant task resets: unit quaternions, hinges within limits, and every contact point above the ground."""
    n = 64
    env = make_env("Ant", n)
    states = env.sample_reset_states(n, torch.Generator().manual_seed(3))
    torch.testing.assert_close(states[:, 3:7].norm(dim=1), torch.ones(n))
    lower, upper = hinge_limits()
    assert bool(((states[:, 7:15] >= lower - 1e-6) & (states[:, 7:15] <= upper + 1e-6)).all())
    assert bool(((states[:, 2] >= 0.75) & (states[:, 2] <= 0.9)).all())
    env.set_states(states)
    contacts = env.get_contacts()
    assert bool((contacts["contact_depths"] > contacts["contact_thicknesses"]).all())


def test_unknown_task_lists_the_valid_ones():
    """Asking for a task a robot does not have is a ValueError naming the valid (robot, task) pairs."""
    with pytest.raises(ValueError, match="valid tasks: .*Cartpole/swingup.*Ant/run"):
        make_task("Cartpole", "run", 1)
    assert ("Ant", "spin_tracking") in TASKS
