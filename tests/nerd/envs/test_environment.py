"""The shared Environment machinery: graph capture, state access, masked resets, input checks."""

import math
import subprocess
import sys

import pytest
import torch

from nerd.envs import ENV_NAMES, env_class, make_env


@pytest.mark.parametrize("name", ["Cartpole", "PendulumWithContact"])
def test_captured_graph_matches_uncaptured_steps(name):
    """Replaying the captured frame gives the same trajectory as launching every kernel from Python."""
    generator = torch.Generator().manual_seed(3)
    envs = [make_env(name, 3, use_graph=g) for g in (True, False)]
    start = envs[0].sample_initial_states(3, generator)
    torques = [envs[0].sample_random_torques(3, generator) for _ in range(20)]
    finals = []
    for env in envs:
        env.set_states(start)
        for tau in torques:
            env.step_with_joint_act(tau)
        finals.append(env.get_states())
    torch.testing.assert_close(finals[0], finals[1], rtol=0, atol=1e-5)
    assert not torch.allclose(finals[0], start)


def test_set_get_states_round_trip():
    """States written with set_states are read back unchanged, and body poses follow."""
    env = make_env("PendulumWithContact", 4)
    states = torch.randn(4, 4)
    env.set_states(states)
    torch.testing.assert_close(env.get_states(), states)
    # Link 0's anchor pose: hinge at (0, 0, 2), rotated by q0 about +y.
    root = env.get_root_body_q()
    torch.testing.assert_close(root[:, :3], torch.tensor([[0.0, 0.0, 2.0]]).expand(4, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(root[:, 4], torch.sin(states[:, 0] / 2), atol=1e-5, rtol=0)


def test_masked_reset_changes_only_selected_envs():
    """reset(env_ids) re-draws the selected envs and leaves the others untouched."""
    env = make_env("Cartpole", 4)
    before = torch.zeros(4, 4)
    env.set_states(before)
    env.reset(env_ids=[1, 3], generator=torch.Generator().manual_seed(0))
    after = env.get_states()
    assert torch.equal(after[[0, 2]], before[[0, 2]])
    assert not torch.equal(after[[1, 3]], before[[1, 3]])


def test_shape_errors_name_the_expected_shape():
    """Wrong state or torque shapes raise a ValueError stating the expected shape."""
    env = make_env("Cartpole", 2)
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        env.set_states(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        env.step_with_joint_act(torch.zeros(2, 1))


def test_unknown_names_list_valid_ones():
    """Unknown env, solver or ground configuration names fail with the valid choices."""
    with pytest.raises(ValueError, match="Cartpole"):
        env_class("Cartpol")
    with pytest.raises(ValueError, match="featherstone"):
        make_env("Cartpole", 1, solver="nope")
    with pytest.raises(ValueError, match="valid ids"):
        make_env("PendulumWithContact", 1, contact_config=9)
    with pytest.raises(ValueError, match="PendulumWithContact only"):
        make_env("Ant", 1, contact_config=1)
    with pytest.raises(ValueError, match="valid variants: sim, real"):
        make_env("CubeToss", 1, robot_variant="rea")
    assert set(ENV_NAMES) == {"Cartpole", "PendulumWithContact", "Ant", "Anymal", "Franka", "CubeToss", "Humanoid"}


@pytest.mark.parametrize("name", ENV_NAMES)
def test_samplers_respect_spec_ranges(name):
    """Initial-state and torque (or action) samplers give the documented shapes, finite values, and bounds."""
    env = make_env(name, 2)
    g = torch.Generator().manual_seed(0)
    states = env.sample_initial_states(64, g)
    if env.random_control == "actions":
        torques = env.sample_random_actions(64, g)
        assert torques.shape == (64, env.action_dim)
    else:
        torques = env.sample_random_torques(64, g)
    assert states.shape == (64, env.state_dim) and torques.shape == (64, env.act_dim)
    assert torch.isfinite(states).all()
    limit = {"Cartpole": 1500.0, "PendulumWithContact": 1500.0, "Ant": 400.0, "Anymal": 1.0, "Franka": 100.0,
             "CubeToss": 0.0, "Humanoid": 135.0}[name]
    assert (torques.abs() <= limit).all()
    if name == "Ant":
        assert ((states[:, 2] >= 1.0) & (states[:, 2] <= 1.3)).all()
        torch.testing.assert_close(states[:, 3:7].norm(dim=1), torch.ones(64))
        # The release's tilt: up to pi/2 about a random axis, so the torso's z axis stays in the upper half-space
        # and some draws tilt well past the task reset's pi/6; torsos spread over +-10 m horizontally.
        tilt = 2.0 * torch.acos(states[:, 6].abs().clamp(max=1.0))
        assert tilt.max() <= math.pi / 2 + 1e-5 and tilt.max() > 1.0
        assert states[:, :2].abs().max() <= 10.0 and states[:, :2].abs().max() > 5.0


def test_environment_and_neural_environment_implement_robot_env():
    """The analytical and the neural simulator both offer the declared RobotEnv interface, without forwarding."""
    from nerd.envs.protocol import RobotEnv
    from nerd.neural_environment import NeuralEnvironment

    env = make_env("PendulumWithContact", 2)
    nenv = NeuralEnvironment(env, None, "ground-truth")
    assert isinstance(env, RobotEnv) and isinstance(nenv, RobotEnv)
    assert not hasattr(NeuralEnvironment, "__getattr__") and not hasattr(type(env), "__getattr__")
    assert nenv.contact_count == env.contact_count == 4 and nenv.state_dim == env.state_dim == 4


def test_environments_import_only_the_engine_and_nerd_frames():
    """nerd.envs sits below the rest of nerd: importing every robot loads only the leaf modules nerd.frames,
    nerd.device_constants, nerd.modes (option names) and nerd.errors."""
    code = (
        "import sys, nerd.envs, nerd.envs.cartpole, nerd.envs.pendulum, nerd.envs.ant, nerd.envs.anymal, "
        "nerd.envs.franka, nerd.envs.cube_toss, nerd.envs.protocol; "
        "bad = sorted(m for m in sys.modules if m.startswith('nerd.') and not m.startswith('nerd.envs') "
        "and m not in ('nerd.frames', 'nerd.device_constants', 'nerd.modes', 'nerd.errors')); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
