"""A model keeps the range of its training data; rollouts and episodes that leave it are counted, or refused."""

import pytest
import torch

from nerd.checkpoint import load_checkpoint, save_checkpoint
from nerd.config import from_dict
from nerd.datasets.windows import TrajectoryWindows
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.evaluation import evaluate_passive
from nerd.features import signature_of_env
from nerd.generation import GenerationConfig, generate_dataset
from nerd.models.nerd_model import NeRDModel
from nerd.neural_environment import NeuralEnvironment
from nerd.training import TrainConfig, train
from tests.helpers import TINY

TINY_MODEL = {"type": "transformer",
              "transformer": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "head_hidden": [16]}}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("range") / "d.hdf5"
    generate_dataset(GenerationConfig("Cartpole", 400, trajectory_length=20, num_envs=20), path, progress=False)
    return path


def model_with_range(path, low: float | None, high: float | None) -> str:
    """A tiny Cartpole checkpoint whose data range is [low, high] in every column (None: no range)."""
    sig = signature_of_env(make_env("Cartpole", 1))
    model = NeRDModel(sig.input_groups, sig.target_dim, TINY)
    if low is not None:
        model.data_range = (torch.full((model.input_dim,), low), torch.full((model.input_dim,), high))
    save_checkpoint(path, model, sig, {"history_length": 10}, history_length=10)
    return str(path)


def test_training_records_the_range_of_its_data_and_checkpoints_keep_it(dataset, tmp_path):
    cfg = from_dict(TrainConfig, {"env_name": "Cartpole", "model": TINY_MODEL, "batch_size": 16, "num_epochs": 1,
                                  "batches_per_epoch": 2, "valid_batches": 1, "rollout_eval": {"num_envs": 0},
                                  "best_checkpoint_by": "valid_loss",
                                  "dataset": {"train": str(dataset), "valid": str(dataset)}})
    train(cfg, tmp_path / "run", progress=False)
    model, _, _ = load_checkpoint(tmp_path / "run/nn/best.pt")
    windows = TrajectoryWindows(dataset, 10)
    low, high = windows.input_range(list(model.input_groups))
    assert torch.equal(model.data_range[0], low) and torch.equal(model.data_range[1], high)
    assert bool((low < high).any())
    # A fine-tune on other data keeps the union of both ranges.
    cfg.dataset.train = str(dataset)
    train(cfg, tmp_path / "tune", init_from=tmp_path / "run/nn/best.pt", progress=False)
    tuned, _, _ = load_checkpoint(tmp_path / "tune/nn/last.pt")
    assert torch.equal(tuned.data_range[0], low) and torch.equal(tuned.data_range[1], high)


def test_a_rollout_pushed_outside_is_counted_and_a_normal_one_is_not(dataset, tmp_path):
    """The integrator flags the envs whose inputs leave the range; the passive evaluation counts those steps per
    rollout, and refuses them with --strict-data-range; a model without a range reports nothing."""
    path = tmp_path / "m.pt"
    model = NeRDModel(signature_of_env(make_env("Cartpole", 1)).input_groups, 4, TINY)
    model.data_range = TrajectoryWindows(dataset, 10).input_range(list(model.input_groups))
    save_checkpoint(path, model, signature_of_env(make_env("Cartpole", 1)), {}, history_length=10)
    nenv = NeuralEnvironment.from_checkpoint(make_env("Cartpole", 2), path, "neural")
    nenv.reset(states=torch.tensor([[0.1, 0.2, 0.0, 0.0], [1.0e4, 0.2, 0.0, 0.0]]))  # a cart at x = 1e4
    nenv.step(torch.zeros(2, 1))
    assert nenv.outside_data(0.1).tolist() == [False, True]

    wide = model_with_range(tmp_path / "wide.pt", -1e9, 1e9)
    narrow = model_with_range(tmp_path / "narrow.pt", 0.0, 0.0)
    none = model_with_range(tmp_path / "none.pt", None, None)
    run = {"env_mode": "neural", "num_envs": 4, "num_rollouts": 4, "horizon": 5, "seed": 1, "progress": False}
    inside = evaluate_passive("Cartpole", wide, **run)["outside_data"]
    assert inside == {"margin": 0.1, "mean_share_of_steps": 0.0, "rollouts_outside": 0, "num_rollouts": 4}
    outside = evaluate_passive("Cartpole", narrow, **run)["outside_data"]
    assert outside["mean_share_of_steps"] == 1.0 and outside["rollouts_outside"] == 4
    assert "outside_data" not in evaluate_passive("Cartpole", none, **run)
    with pytest.raises(UserError, match="at step 1 of a rollout, 4 of 4 envs read inputs beyond"):
        evaluate_passive("Cartpole", narrow, **run, strict_data_range=True)


def test_playback_counts_the_episodes_that_leave_the_data(tmp_path):
    from nerd.rl.config import load_rl_config, with_num_envs
    from nerd.rl.playback import evaluate_policy, format_playback
    from nerd.rl.vec_env import make_vec_env
    from tests.helpers import REPO

    cfg = with_num_envs(load_rl_config(REPO / "cfg/rl/Cartpole/swingup_cpu.yaml", ["env.episode_length=5"]), 4)
    zero = lambda obs: torch.zeros(len(obs), 1)  # noqa: E731
    cfg.env.nerd_model_path = model_with_range(tmp_path / "wide.pt", -1e9, 1e9)
    result = evaluate_policy(make_vec_env(cfg.env), zero, 4)
    assert result["outside_data"]["episodes_outside"] == 0
    cfg.env.nerd_model_path = model_with_range(tmp_path / "narrow.pt", 0.0, 0.0)
    result = evaluate_policy(make_vec_env(cfg.env), zero, 4)
    assert result["outside_data"] == {"margin": 0.1, "mean_share_of_steps": 1.0, "episodes_outside": 4}
    line = format_playback({**result, "robot": "Cartpole", "task": "swingup", "env_mode": "neural"})
    assert "100.0 % of steps beyond the NeRD model's training data (4 of 4 episodes)" in line
    cfg.env.strict_data_range = True
    with pytest.raises(UserError, match="beyond the NeRD model's training data"):
        evaluate_policy(make_vec_env(cfg.env), zero, 4)


def test_the_data_range_cutoff_ends_episodes_at_the_first_step_beyond_the_data(dataset, tmp_path):
    """With ``data_range_cutoff`` an episode terminates exactly at the steps whose inputs leave the model's range (a
    cart beyond the data's but within the task's bounds), the others run on; playback ignores the option; a model
    without a range is refused."""
    from nerd.rl.config import load_rl_config, with_num_envs
    from nerd.rl.vec_env import make_vec_env
    from tests.helpers import REPO

    cfg = with_num_envs(load_rl_config(REPO / "cfg/rl/Cartpole/swingup_cpu.yaml", ["env.episode_length=50"]), 8)
    sig = signature_of_env(make_env("Cartpole", 1))
    model = NeRDModel(sig.input_groups, sig.target_dim, TINY)
    low, high = torch.full((model.input_dim,), -1.0e9), torch.full((model.input_dim,), 1.0e9)
    low[0], high[0] = -1.0, 1.0  # the data's carts stayed within 1 m; the task ends an episode beyond 4 m only
    model.data_range = (low, high)
    save_checkpoint(tmp_path / "m.pt", model, sig, {}, history_length=10)
    cfg.env.nerd_model_path = str(tmp_path / "m.pt")

    def first_step(vec_env) -> tuple[torch.Tensor, torch.Tensor]:
        """Terminations and outside flags of one step from the reset, with the first four carts at x = 3 m."""
        vec_env.reset()
        states = vec_env.nenv.get_states().clone()
        states[:4, 0] = 3.0
        vec_env.nenv.reset(states=states)
        vec_env.track_outside_data = True
        _, _, _, infos = vec_env.step(torch.zeros(8, 1))
        return infos["terminated"], infos["outside_data"]

    far = torch.arange(8) < 4
    plain_terminated, plain_outside = first_step(make_vec_env(cfg.env))
    assert torch.equal(plain_outside, far) and not bool(plain_terminated.any())
    cfg.env.data_range_cutoff = True
    terminated, outside = first_step(make_vec_env(cfg.env))
    assert torch.equal(outside, far) and torch.equal(terminated, far)
    # The task's own episodes in playback: the option is left out, as the disagreement cutoff is.
    assert not make_vec_env(cfg.env.for_evaluation()).data_range_cutoff
    cfg.env.nerd_model_path = model_with_range(tmp_path / "none.pt", None, None)
    with pytest.raises(UserError, match="data_range_cutoff needs a NeRD model that keeps"):
        make_vec_env(cfg.env)


def test_an_older_checkpoint_gets_the_range_of_its_data_recorded(dataset, tmp_path):
    from nerd.scripts.data_range import main

    old = model_with_range(tmp_path / "old.pt", None, None)
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        main([old, "--datasets", str(dataset), "--output", old])
    main([old, "--datasets", str(dataset), str(dataset), "--output", str(tmp_path / "new.pt")])
    before, _, _ = load_checkpoint(old)
    after, _, _ = load_checkpoint(tmp_path / "new.pt")
    assert before.data_range is None
    expected = TrajectoryWindows(dataset, 10).input_range(list(after.input_groups))
    assert torch.equal(after.data_range[0], expected[0]) and torch.equal(after.data_range[1], expected[1])
    for a, b in zip(before.state_dict().values(), after.state_dict().values(), strict=True):
        assert torch.equal(a, b)
