"""NeRDVecEnv: step/reset contract, per-env NeRD history on reset, divergence handling, rl-games registration."""

import pytest
import torch
from rl_games.common import vecenv

from nerd.rl.config import RLEnvConfig
from nerd.rl.tasks import make_task
from nerd.rl.vec_env import NeRDVecEnv, make_vec_env, register_with_rl_games
from tests.helpers import tiny_neural_env


def tiny_vec_env(robot: str, task: str, num_envs: int, env_mode: str = "neural", **kwargs) -> NeRDVecEnv:
    """A vec env on a NeuralEnvironment with an untrained tiny NeRD model."""
    nenv = tiny_neural_env(robot, num_envs, env_mode)
    return NeRDVecEnv(nenv, make_task(robot, task, num_envs), **kwargs)


def test_reset_clears_only_the_done_envs_history():
    """When env 1 times out, only env 1's NeRD history restarts; envs 0 and 2 keep theirs."""
    venv = tiny_vec_env("Cartpole", "swingup", 3, episode_length=1000)
    venv.reset()
    zero = torch.zeros(3, 1)
    for _ in range(4):
        venv.step(zero)
    history = venv.nenv.integrator.history_count
    assert history.tolist() == [4, 4, 4]
    venv.progress[1] = venv.episode_length - 1
    _, _, dones, infos = venv.step(zero)
    assert dones.tolist() == [0, 1, 0] and infos["time_outs"].tolist() == [False, True, False]
    assert venv.nenv.integrator.history_count.tolist() == [5, 0, 5]
    assert venv.progress.tolist() == [5, 0, 5]
    venv.step(zero)
    assert venv.nenv.integrator.history_count.tolist() == [6, 1, 6]


def test_step_returns_rewards_terminations_and_new_episode_observations():
    """A failing env is terminated (not timed out), scored by the task, and observed in its new episode."""
    venv = tiny_vec_env("Cartpole", "swingup", 2, env_mode="ground-truth")
    obs = venv.reset()
    assert obs.shape == (2, 4) and venv.observation_space.shape == (4,) and venv.action_space.shape == (1,)
    start = torch.tensor([[0.0, 0.1, 0.0, 0.0], [3.99, 0.0, 9.0, 0.0]])
    venv.nenv.set_states(start)
    obs, rewards, dones, infos = venv.step(torch.tensor([[0.0], [1.0]]))
    assert dones.dtype == torch.uint8 and dones.tolist() == [0, 1]
    assert infos["terminated"].tolist() == [False, True] and infos["time_outs"].tolist() == [False, False]
    expected_0 = venv.task.rewards(venv.nenv.get_states()[:1], torch.zeros(1, 1))
    torch.testing.assert_close(rewards[:1], expected_0)
    assert rewards[1] < 5.0 - 0.05 * 4.0**2  # scored on the failed state, before the reset
    # The reset env's observation is that of its fresh state; the other env continues.
    torch.testing.assert_close(obs, venv.task.observations(venv.nenv.get_states(), venv.last_actions))
    assert abs(float(obs[1, 0])) <= 1.0 and venv.progress.tolist() == [1, 0]


def test_diverged_neural_envs_end_their_episode_alone():
    """A non-finite neural prediction terminates that env with reward 0 instead of raising for the batch."""
    venv = tiny_vec_env("Cartpole", "swingup", 3)
    venv.reset()
    integrator = venv.nenv.integrator
    predict = integrator.predict_targets

    def poisoned():
        targets = predict().clone()
        targets[2] = float("nan")
        return targets

    integrator.predict_targets = poisoned
    obs, rewards, dones, infos = venv.step(torch.zeros(3, 1))
    assert infos["diverged"].tolist() == [False, False, True] and dones.tolist() == [0, 0, 1]
    assert rewards[2] == 0.0 and bool(torch.isfinite(obs).all()) and bool(torch.isfinite(rewards).all())


@pytest.mark.parametrize("env_mode", ["neural", "ground-truth"])
def test_nan_actions_are_refused_in_the_steps_one_synchronisation(env_mode):
    """The vec env checks the actions itself (folded with the done count into one host sync per step)."""
    venv = tiny_vec_env("Cartpole", "swingup", 2, env_mode=env_mode)
    venv.reset()
    with pytest.raises(ValueError, match="NaN or inf"):
        venv.step(torch.tensor([[0.0], [float("nan")]]))


def test_ant_vec_env_runs_in_both_modes():
    """The Ant run task steps in neural (untrained tiny model) and ground-truth mode with finite outputs."""
    venv = tiny_vec_env("Ant", "run", 2)
    venv.reset()
    for mode in ("neural", "ground-truth"):
        venv.nenv.set_env_mode(mode)
        for _ in range(3):
            obs, rewards, dones, _ = venv.step(torch.rand(2, 8) * 2 - 1)
        assert obs.shape == (2, 28) and bool(torch.isfinite(obs).all()) and bool(torch.isfinite(rewards).all())
    assert venv.last_actions.abs().max() <= 1.0


def test_registered_with_rl_games():
    """rl-games builds the vec env by name through its own registry, and checks the actor count."""
    register_with_rl_games()
    env_config = {"env": {"robot": "Cartpole", "task": "swingup", "num_envs": 3, "env_mode": "ground-truth"},
                  "device": "cpu", "seed": 0}
    venv = vecenv.create_vec_env("nerd", 3, **env_config)
    assert isinstance(venv, NeRDVecEnv) and venv.num_envs == 3
    assert venv.get_env_info()["observation_space"].shape == (4,)
    with pytest.raises(ValueError, match="asks for 4 actors"):
        vecenv.create_vec_env("nerd", 4, **env_config)


def test_same_seed_gives_the_same_episodes():
    """Reseeding the vec env replays the same initial states, so simulators can be compared episode by episode."""
    cfg = RLEnvConfig(robot="Cartpole", task="swingup", num_envs=4, env_mode="ground-truth")
    venv = make_vec_env(cfg, seed=7)
    first = venv.reset()
    venv.reset()
    venv.seed(7)
    torch.testing.assert_close(venv.reset(), first)


def test_neural_mode_without_a_model_is_refused():
    """Neural mode with no model path is a ValueError that says which flag to pass."""
    with pytest.raises(ValueError, match="--nerd-model-path"):
        make_vec_env(RLEnvConfig(robot="Cartpole", task="swingup", num_envs=1, env_mode="neural"))


def test_franka_position_control_holds_each_action_for_two_frames():
    """In the release's joint-position mode one RL step is 2 PD frames, the target recomputed from q each frame;
    torque mode is one frame."""
    from nerd.envs import make_env

    actions = torch.tensor([[0.5, -1.0, 1.0, 0.2, -0.3, 1.0, -1.0]])
    for mode, frames in (("position", 2), ("torque", 1)):
        cfg = RLEnvConfig(robot="Franka", task="reach", num_envs=1, env_mode="ground-truth", control_mode=mode)
        venv = make_vec_env(cfg)
        venv.reset()
        start = venv.nenv.get_states()
        venv.step(actions)
        reference = make_env("Franka", 1, control_mode=mode)
        reference.set_states(start)
        for _ in range(frames):
            reference.step(actions)
        torch.testing.assert_close(venv.nenv.get_states(), reference.get_states())
        assert venv.progress.tolist() == [1]
