"""Checkpoints, training, resuming and passive evaluation on tiny generated data."""

import dataclasses

import pytest
import torch

from nerd.checkpoint import load_checkpoint, save_checkpoint
from nerd.config import from_dict
from nerd.envs import make_env
from nerd.evaluation import evaluate_passive
from nerd.generation import GenerationConfig, generate_dataset
from nerd.neural_environment import NeuralEnvironment
from nerd.training import TrainConfig, get_lr, train

TINY_MODEL = {"type": "transformer",
              "transformer": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "head_hidden": [16]}}


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    """A pendulum model trained for 2 short epochs on 40 generated trajectories."""
    root = tmp_path_factory.mktemp("run")
    for split, seed, n in (("train", 0, 4000), ("valid", 1, 1000)):
        generate_dataset(GenerationConfig("PendulumWithContact", n, trajectory_length=100, num_envs=50, seed=seed),
                         root / f"{split}.hdf5", progress=False)
    cfg = from_dict(TrainConfig, {
        "env_name": "PendulumWithContact", "model": TINY_MODEL, "num_epochs": 2, "batches_per_epoch": 30,
        "batch_size": 64, "valid_batches": 5,
        "dataset": {"train": str(root / "train.hdf5"), "valid": str(root / "valid.hdf5")},
        "rollout_eval": {"num_envs": 4, "horizon": 20},
    })
    summary = train(cfg, root / "logs", seed=0, progress=False)
    return root, cfg, summary


def test_training_reduces_validation_loss_and_writes_a_run(pendulum_run):
    """Validation loss falls below the untrained value (~1 for normalised targets); the run directory is complete."""
    root, _, summary = pendulum_run
    losses = [e["valid_loss"] for e in summary["epochs"]]
    assert losses[-1] < 0.8, losses
    for name in ("config.yaml", "git.yaml", "summary.yaml", "nn/best.pt", "nn/last.pt"):
        assert (root / "logs" / name).exists(), name
    assert any(p.name.startswith("events.out.tfevents") for p in (root / "logs").iterdir())
    assert "joint_position_error" in summary["epochs"][-1]


def test_checkpoint_round_trip_is_safe_and_exact(pendulum_run, tmp_path):
    """A checkpoint loads with weights_only=True and reproduces the model's predictions exactly."""
    root, _, _ = pendulum_run
    model, sig, payload = load_checkpoint(root / "logs/nn/last.pt")
    raw = torch.load(root / "logs/nn/last.pt", weights_only=True)
    assert raw["signature"]["env_name"] == "PendulumWithContact" and payload["epoch"] == 1
    assert raw["history_length"] == 10  # a field of its own, not only inside the training config
    inputs = {name: torch.randn(3, 5, w) for name, w in sig.input_groups.items()}
    path = save_checkpoint(tmp_path / "copy.pt", model, sig, payload["config"],
                           history_length=payload["history_length"])
    again, _, _ = load_checkpoint(path)
    torch.testing.assert_close(again(inputs), model(inputs), rtol=0, atol=0)
    torch.testing.assert_close(again.target_norm.mean, model.target_norm.mean, rtol=0, atol=0)


def test_wrong_robot_or_corrupt_checkpoint_is_refused(pendulum_run, tmp_path):
    """Loading a pendulum checkpoint into a Cartpole, or a non-checkpoint file, is a one-line ValueError."""
    root, _, _ = pendulum_run
    with pytest.raises(ValueError, match="for robot PendulumWithContact, not Cartpole"):
        NeuralEnvironment.from_checkpoint(make_env("Cartpole", 1), root / "logs/nn/best.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a loadable nerd checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")
    # Right format, wrong tensors: a one-line ValueError, not a load_state_dict traceback.
    payload = torch.load(root / "logs/nn/best.pt", weights_only=True)
    payload["model_state"] = {k: v[..., :1] if v.dim() else v for k, v in payload["model_state"].items()}
    torch.save(payload, tmp_path / "damaged.pt")
    with pytest.raises(ValueError, match="damaged nerd checkpoint"):
        load_checkpoint(tmp_path / "damaged.pt")


def test_resume_continues_from_the_next_epoch(pendulum_run, tmp_path):
    """--checkpoint on the same training file restores the optimiser and continues at the next epoch."""
    root, cfg, _ = pendulum_run
    cfg = dataclasses.replace(cfg, num_epochs=3)
    summary = train(cfg, tmp_path / "resumed", seed=0, checkpoint=root / "logs/nn/last.pt", progress=False)
    assert [e["epoch"] for e in summary["epochs"]] == [2]
    # The best checkpoint so far travels with the resumed run and is replaced only by a better one.
    previous_best = pendulum_run[2]["best_valid_loss"]
    _, _, best = load_checkpoint(tmp_path / "resumed/nn/best.pt")
    assert best["extra"]["valid_loss"] == min(previous_best, summary["epochs"][0]["valid_loss"])


def test_ground_truth_evaluation_has_zero_error(pendulum_run):
    """Evaluating the ground truth against itself gives exactly zero error (the sanity check of spec §9)."""
    results = evaluate_passive("PendulumWithContact", None, "ground-truth", 4, 6, 15, seed=500, contact_config=1,
                               progress=False)
    assert results["num_rollouts"] == 6 and len(results["error_vs_step"]["joint_position_error"]) == 15
    assert all(v == 0.0 for v in results["metrics"].values())


def test_neural_evaluation_reports_errors(pendulum_run):
    """A (barely trained) neural model is evaluated on a ground configuration with finite, non-zero errors."""
    root, _, _ = pendulum_run
    results = evaluate_passive("PendulumWithContact", str(root / "logs/nn/best.pt"), "neural", 4, 4, 10, seed=500,
                               contact_config=2, progress=False)
    assert 0.0 < results["metrics"]["joint_position_error"] < 10.0


def test_learning_rate_decays_linearly():
    """lr goes from lr_start at the first step to lr_end at the last."""
    assert get_lr(0, 11, 1e-3, 1e-4) == 1e-3
    assert abs(get_lr(10, 11, 1e-3, 1e-4) - 1e-4) < 1e-12
    assert abs(get_lr(5, 11, 1e-3, 1e-4) - 5.5e-4) < 1e-12
