"""Checkpoints, training, resuming and passive evaluation on tiny generated data."""

import csv
import dataclasses
import shutil
import time

import pytest
import torch

from nerd.checkpoint import average_checkpoints, checkpoint_label, load_checkpoint, save_checkpoint
from nerd.config import ConfigError, from_dict, load_config
from nerd.datasets.windows import TrajectoryWindows
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.evaluation import evaluate_passive
from nerd.generation import GenerationConfig, generate_dataset
from nerd.neural_environment import NeuralEnvironment
from nerd.scripts.average import main as average_main
from nerd.training import RolloutEvalConfig, TrainConfig, get_lr, train, validation_loss
from nerd.training import epoch as epoch_module
from nerd.training import loop as loop_module
from nerd.training import resume as resume_module
from tests.helpers import REPO

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


@pytest.mark.parametrize("key,value,no_op", [("input_noise", 0.01, 0.0), ("unroll_steps", 4, 1),
                                             ("mirror_data", "true", "false")])
def test_removed_options_are_refused_unless_recorded_at_their_no_op_value(tmp_path, key, value, no_op):
    """Options measured as no help (docs/findings.md) are gone: a config that sets one is refused, naming the key;
    a run recorded before the removal (the key at its no-op value, e.g. a shipped model's train_config.yaml) still
    loads, as the same config without the key."""
    path = tmp_path / "cfg.yaml"
    path.write_text(f"env_name: Cartpole\n{key}: {value}\n")
    with pytest.raises(ConfigError, match=f"config key '{key}' was removed"):
        load_config(path, TrainConfig)
    path.write_text(f"env_name: Cartpole\n{key}: {no_op}\n")
    assert load_config(path, TrainConfig) == TrainConfig(env_name="Cartpole")
    for shipped in (REPO / "pretrained_models").rglob("train_config*.yaml"):
        load_config(shipped, TrainConfig)


def test_training_reduces_validation_loss_and_writes_a_run(pendulum_run):
    """Validation loss falls below the untrained value (~1 for normalised targets); the run directory is complete."""
    root, _, summary = pendulum_run
    losses = [e["valid_loss"] for e in summary["epochs"]]
    assert losses[-1] < 0.8, losses
    for name in ("config.yaml", "git.yaml", "summary.yaml", "nn/best.pt", "nn/last.pt", "curve.png"):
        assert (root / "logs" / name).exists(), name
    assert any(p.name.startswith("events.out.tfevents") for p in (root / "logs").iterdir())
    assert "joint_position_error" in summary["epochs"][-1]
    # The curve: one row per epoch, against the windows seen (30 batches of 64 per epoch).
    rows = list(csv.DictReader((root / "logs/curve.csv").open()))
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    assert [int(r["windows_seen"]) for r in rows] == [30 * 64, 60 * 64]
    assert float(rows[-1]["valid_loss"]) == pytest.approx(losses[-1])


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


def test_checkpoint_label_names_the_run_or_the_shipped_robot():
    """Plots name a run's checkpoint by its run directory, not its ``nn`` folder, and a shipped model by its robot."""
    assert checkpoint_label("runs/Ant_tail30_task/nn/best.pt") == "Ant_tail30_task"
    assert checkpoint_label("pretrained_models/NeRD_models/Ant/model.pt") == "Ant"
    assert checkpoint_label("runs/ant_model_v29.pt") == "ant_model_v29"


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
    """--resume restores the optimiser and continues the run in its own directory at the next epoch; the summary
    and the curve keep the epochs before the interruption."""
    root, cfg, first = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    cfg = dataclasses.replace(cfg, num_epochs=3)
    summary = train(cfg, tmp_path / "run", seed=0, resume=True, progress=False)
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1, 2]
    assert summary["epochs"][:2] == first["epochs"]
    assert summary["epochs"][2]["windows_seen"] == 3 * 30 * 64
    assert len(list(csv.DictReader((tmp_path / "run/curve.csv").open()))) == 3
    # The best checkpoint so far is replaced only by a better one.
    previous_best = first["best_score"]
    _, _, best = load_checkpoint(tmp_path / "run/nn/best.pt")
    assert best["extra"]["best_score"] == pytest.approx(min(previous_best, rollout_score(summary["epochs"][-1])))


def test_a_run_stopped_during_an_epochs_rollout_check_resumes_at_that_epoch(pendulum_run, tmp_path, monkeypatch):
    """Stopped while epoch 2's rollout check runs, the run resumes at epoch 2, not after it: its curve has no gap
    and epoch 2 is a candidate for best.pt (the check used to load last.pt, which then already held epoch 2)."""
    root, cfg, first = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    cfg = dataclasses.replace(cfg, num_epochs=3)
    evaluate_epoch = loop_module.evaluate_epoch

    def stopped_at_epoch_2(cfg, checkpoint, epoch, *args, **kwargs):
        if epoch == 2:
            raise KeyboardInterrupt
        return evaluate_epoch(cfg, checkpoint, epoch, *args, **kwargs)

    monkeypatch.setattr(loop_module, "evaluate_epoch", stopped_at_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", seed=0, resume=True, progress=False)
    assert torch.load(tmp_path / "run/nn/last.pt", weights_only=True)["epoch"] == 1
    assert not (tmp_path / "run/nn/epoch_check.pt").exists()
    monkeypatch.setattr(loop_module, "evaluate_epoch", evaluate_epoch)
    summary = train(cfg, tmp_path / "run", seed=0, resume=True, progress=False)
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1, 2]
    assert "joint_position_error" in summary["epochs"][2]
    assert [int(r["epoch"]) for r in csv.DictReader((tmp_path / "run/curve.csv").open())] == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "run/nn").iterdir()) == ["best.pt", "last.pt"]


def test_resume_counts_the_steps_an_epoch_cut_short_took(pendulum_run, tmp_path):
    """An epoch that its time budget cut short took fewer than batches_per_epoch steps: a resumed run continues
    the step count (windows seen, the step-based learning rate) from the steps recorded, not from whole epochs."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    last = torch.load(tmp_path / "run/nn/last.pt", weights_only=True)
    assert last["extra"]["optimizer_steps"] == 2 * 30
    last["extra"]["optimizer_steps"] = 50  # as if the budget had stopped epoch 1 after 20 of its 30 steps
    torch.save(last, tmp_path / "run/nn/last.pt")
    summary = train(dataclasses.replace(cfg, num_epochs=3), tmp_path / "run", seed=0, resume=True, progress=False)
    assert summary["optimizer_steps"] == 50 + 30
    assert summary["epochs"][2]["windows_seen"] == (50 + 30) * 64


def test_resume_continues_the_time_budget(pendulum_run, tmp_path):
    """A resumed run counts the CPU time its earlier epochs spent against time_budget_minutes, so its learning rate
    keeps decaying where it stopped instead of restarting; a budget already spent trains no further epoch."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    _, _, last = load_checkpoint(tmp_path / "run/nn/last.pt")
    spent = last["extra"]["step_seconds"]
    assert spent > 0
    cfg = dataclasses.replace(cfg, num_epochs=4, time_budget_minutes=0.99 * spent / 60.0)
    summary = train(cfg, tmp_path / "run", seed=0, resume=True, progress=False)
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1]  # no new epoch
    assert summary["step_seconds"] == pytest.approx(spent)


@pytest.mark.parametrize("clock", ["process", "wall"])
def test_time_budget_clock(pendulum_run, tmp_path, monkeypatch, clock):
    """A step that waits (as a CPU does for a GPU) counts against a wall-clock budget and not against a CPU-time
    one. Each of 4 steps sleeps 0.5 s: a 1 s wall budget stops the run by its second step, while under a CPU-time budget
    the 2 s of sleep are not counted (the tiny steps' own CPU time is far less). Without a rollout check, last.pt is
    still written."""
    _, cfg, _ = pendulum_run
    original = epoch_module.accumulate_gradients

    def waiting(*args, **kwargs):
        time.sleep(0.5)
        return original(*args, **kwargs)

    monkeypatch.setattr(epoch_module, "accumulate_gradients", waiting)
    cfg = dataclasses.replace(cfg, num_epochs=1, batches_per_epoch=4, time_budget_clock=clock,
                              time_budget_minutes=(1.0 if clock == "wall" else 100.0) / 60.0,
                              best_checkpoint_by="valid_loss",
                              rollout_eval=dataclasses.replace(cfg.rollout_eval, num_envs=0))
    summary = train(cfg, tmp_path / "run", seed=0, progress=False)
    if clock == "wall":
        assert summary["optimizer_steps"] <= 2 and summary["step_seconds"] >= 1.0
    else:
        assert summary["optimizer_steps"] == 4 and summary["step_seconds"] < 2.0
    assert (tmp_path / "run/nn/last.pt").exists() and (tmp_path / "run/nn/best.pt").exists()


def test_resume_keeps_the_runs_seed(pendulum_run, tmp_path):
    """A resume without a seed continues with the run's own (recorded in last.pt), so its batch orders are those of
    the uninterrupted run; another seed is refused before anything is written."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    _, _, last = load_checkpoint(tmp_path / "run/nn/last.pt")
    assert last["extra"]["seed"] == 0
    before = (tmp_path / "run/nn/last.pt").read_bytes()
    with pytest.raises(UserError, match="trained with seed 0; resuming it with seed 5"):
        train(dataclasses.replace(cfg, num_epochs=3), tmp_path / "run", seed=5, resume=True, progress=False)
    assert (tmp_path / "run/nn/last.pt").read_bytes() == before
    summary = train(dataclasses.replace(cfg, num_epochs=3), tmp_path / "run", resume=True, progress=False)
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1, 2]
    _, _, last = load_checkpoint(tmp_path / "run/nn/last.pt")
    assert last["extra"]["seed"] == 0


def test_resume_refuses_a_changed_model_history_or_training_file(pendulum_run, tmp_path):
    """Resuming with other model sizes, history_length or training file is refused, naming what changed."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    before = (tmp_path / "run/nn/last.pt").read_bytes()
    bigger = dataclasses.replace(cfg.model, transformer=dataclasses.replace(cfg.model.transformer, n_layer=2))
    other_data = dataclasses.replace(cfg.dataset, train=cfg.dataset.valid)
    for changed, message in ((dataclasses.replace(cfg, model=bigger), r"model.transformer.n_layer 1 -> 2"),
                             (dataclasses.replace(cfg, history_length=5), "history_length 10 -> 5"),
                             (dataclasses.replace(cfg, dataset=other_data), "dataset.train")):
        with pytest.raises(ConfigError, match=message):
            train(changed, tmp_path / "run", seed=0, resume=True, progress=False)
    assert (tmp_path / "run/nn/last.pt").read_bytes() == before
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(cfg, tmp_path / "empty", seed=0, resume=True, progress=False)


def test_resume_refuses_a_damaged_best_checkpoint(pendulum_run, tmp_path):
    """A corrupt best.pt beside the run's last.pt is one error naming the file, before anything is written."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "run")
    (tmp_path / "run/nn/best.pt").write_bytes(b"\x00" * 100)
    with pytest.raises(UserError, match=r"best.pt is not a loadable nerd checkpoint"):
        train(dataclasses.replace(cfg, num_epochs=3), tmp_path / "run", seed=0, resume=True, progress=False)


def test_init_from_starts_a_new_run_and_never_replaces_one(pendulum_run, tmp_path):
    """--init-from A into a directory holding a run is refused without --overwrite; into a fresh one it starts at
    epoch 0 from A's weights; a model config that differs from A's is refused."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "b")
    before = {p: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match="holds a run; pass --overwrite"):
        train(cfg, tmp_path / "b", seed=0, init_from=root / "logs/nn/last.pt", progress=False)
    assert {p: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()} == before
    wider = dataclasses.replace(cfg.model, transformer=dataclasses.replace(cfg.model.transformer, n_embd=32))
    with pytest.raises(ConfigError, match="n_embd 16 -> 32"):
        train(dataclasses.replace(cfg, model=wider), tmp_path / "c", seed=0, init_from=root / "logs/nn/last.pt",
              progress=False)
    assert not (tmp_path / "c").exists()
    summary = train(dataclasses.replace(cfg, num_epochs=1), tmp_path / "c", seed=0,
                    init_from=root / "logs/nn/last.pt", progress=False)
    assert [e["epoch"] for e in summary["epochs"]] == [0]
    # Fine-tuning starts from the trained weights: its first epoch beats an untrained model's validation loss (~1).
    assert summary["epochs"][0]["valid_loss"] < 0.8


def _assert_mean(averaged, *models, atol=1e-6):
    for name, value in averaged.named_parameters():
        mean = sum(dict(m.named_parameters())[name] for m in models) / len(models)
        torch.testing.assert_close(value, mean, rtol=0, atol=atol)


def test_averaged_checkpoint_is_the_mean_of_its_inputs(pendulum_run, tmp_path, capsys):
    """nerd-average writes the element-wise mean of the weights, keeps the shared normalisation, and prints the
    validation loss of every input and of the average on the same windows."""
    root, cfg, _ = pendulum_run
    model, sig, payload = load_checkpoint(root / "logs/nn/last.pt")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    other = save_checkpoint(tmp_path / "other.pt", model, sig, payload["config"],
                            history_length=payload["history_length"])
    first, _, _ = load_checkpoint(root / "logs/nn/last.pt")
    average_main([str(root / "logs/nn/last.pt"), str(other), "--output", str(tmp_path / "avg.pt"),
                  "--valid-dataset", cfg.dataset.valid, "--valid-batches", "2", "--batch-size", "64"])
    averaged, _, saved = load_checkpoint(tmp_path / "avg.pt")
    _assert_mean(averaged, first, model, atol=1e-7)
    torch.testing.assert_close(averaged.target_norm.mean, first.target_norm.mean, rtol=0, atol=0)
    assert saved["extra"]["averaged_from"] == [str(root / "logs/nn/last.pt"), str(other)]
    out = capsys.readouterr().out
    assert out.count("validation loss") == 4 and "the average's validation loss is" in out
    assert set(saved["extra"]["valid_loss"]) == {"dataset", str(root / "logs/nn/last.pt"), str(other), "average"}
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        average_main([str(root / "logs/nn/last.pt"), str(other), "--output", str(tmp_path / "avg.pt")])
    with pytest.raises(UserError, match="--valid-batches must be at least 1"):
        average_main([str(root / "logs/nn/last.pt"), str(other), "--output", str(tmp_path / "avg2.pt"),
                      "--valid-batches", "0"])


def test_weight_averaging_keeps_the_mean_of_epoch_ends(pendulum_run, tmp_path):
    """average_weights_from 0 in a fine-tune: nn/averaged.pt is the mean of the starting weights and every epoch's
    end, a resumed run continues that mean, and best.pt is whichever of the two is better by the criterion."""
    root, cfg, _ = pendulum_run
    start = root / "logs/nn/last.pt"
    cfg = dataclasses.replace(cfg, num_epochs=1, average_weights_from=0.0, best_checkpoint_by="valid_loss")
    summary = train(cfg, tmp_path / "run", seed=0, init_from=start, progress=False)
    first_end = load_checkpoint(tmp_path / "run/nn/last.pt")[0]
    _assert_mean(load_checkpoint(tmp_path / "run/nn/averaged.pt")[0], load_checkpoint(start)[0], first_end)
    record = summary["epochs"][0]
    assert {"averaged_valid_loss", "averaged_joint_position_error"} <= set(record)
    best = load_checkpoint(tmp_path / "run/nn/best.pt")[2]["extra"]
    assert best["valid_loss"] == min(record["valid_loss"], record["averaged_valid_loss"])
    assert best["weights"] == ("averaged" if record["averaged_valid_loss"] < record["valid_loss"] else "trained")
    train(dataclasses.replace(cfg, num_epochs=2), tmp_path / "run", resume=True, progress=False)
    _assert_mean(load_checkpoint(tmp_path / "run/nn/averaged.pt")[0], load_checkpoint(start)[0], first_end,
                 load_checkpoint(tmp_path / "run/nn/last.pt")[0])


def test_weight_averaging_starts_at_its_fraction_of_the_run(pendulum_run, tmp_path):
    """From 0.75 of a 2-epoch run only the second epoch's end is averaged (a new run never counts its random
    start): the first epoch has no average, and the average after the second is its weights."""
    root, cfg, _ = pendulum_run
    cfg = dataclasses.replace(cfg, average_weights_from=0.75, rollout_eval=RolloutEvalConfig(num_envs=0),
                              best_checkpoint_by="valid_loss")
    summary = train(cfg, tmp_path / "run", seed=0, progress=False)
    assert "averaged_valid_loss" not in summary["epochs"][0]
    assert summary["epochs"][1]["averaged_valid_loss"] == pytest.approx(summary["epochs"][1]["valid_loss"])
    _assert_mean(load_checkpoint(tmp_path / "run/nn/averaged.pt")[0], load_checkpoint(tmp_path / "run/nn/last.pt")[0])
    with pytest.raises(ConfigError, match="average_weights_from"):
        from_dict(TrainConfig, {"env_name": "Cartpole", "average_weights_from": 1.5})


def test_only_fine_tunes_of_one_model_are_averaged(pendulum_run, tmp_path):
    """Checkpoints with other normalisation statistics or another model config, or a single input, are refused."""
    root, _, _ = pendulum_run
    model, sig, payload = load_checkpoint(root / "logs/nn/last.pt")
    model.target_norm.mean.add_(1.0)
    renormalised = save_checkpoint(tmp_path / "renormalised.pt", model, sig, payload["config"],
                                   history_length=payload["history_length"])
    with pytest.raises(UserError, match="other normalisation statistics"):
        average_checkpoints([root / "logs/nn/last.pt", renormalised])
    with pytest.raises(UserError, match="another model config or history length"):
        average_checkpoints([root / "logs/nn/last.pt", save_checkpoint(
            tmp_path / "h5.pt", model, sig, payload["config"], history_length=5)])
    with pytest.raises(UserError, match="at least two checkpoints"):
        average_checkpoints([root / "logs/nn/last.pt"])


def test_overwrite_keeps_the_old_run_until_the_new_one_has_started(pendulum_run, tmp_path, monkeypatch):
    """--overwrite with a bad dataset path, or a start that fails before the first checkpoint, leaves the old run
    as it was, and a failed start in a new directory leaves no directory holding only config.yaml."""
    root, cfg, _ = pendulum_run
    shutil.copytree(root / "logs", tmp_path / "b")
    before = {p: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    typo = dataclasses.replace(cfg, dataset=dataclasses.replace(cfg.dataset, train=str(root / "trian.hdf5")))
    with pytest.raises(UserError, match="dataset not found.*trian.hdf5"):
        train(typo, tmp_path / "b", seed=0, overwrite=True, progress=False)
    assert {p: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()} == before

    def failing_epoch(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop_module, "train_epoch", failing_epoch)
    for logdir in (tmp_path / "b", tmp_path / "new"):
        with pytest.raises(KeyboardInterrupt):
            train(cfg, logdir, seed=0, overwrite=True, progress=False)
    assert {p: p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()} == before
    assert not (tmp_path / "new").exists()


def rollout_score(epoch: dict) -> float:
    """The pendulum's rollout selection score: its passive metrics summed (rad + rad)."""
    return epoch["base_orientation_error"] + epoch["joint_position_error"]


@pytest.mark.parametrize("criterion", ["rollout", "valid_loss"])
def test_best_checkpoint_minimises_the_chosen_criterion(pendulum_run, tmp_path, criterion):
    """best.pt is the epoch with the lowest rollout error (default) or the lowest validation loss."""
    root, cfg, summary = pendulum_run
    if criterion == "valid_loss":
        summary = train(dataclasses.replace(cfg, best_checkpoint_by="valid_loss"), tmp_path / "v", seed=0,
                        progress=False)
        best_path = tmp_path / "v/nn/best.pt"
    else:
        best_path = root / "logs/nn/best.pt"
    key = rollout_score if criterion == "rollout" else (lambda e: e["valid_loss"])
    best_epoch = min(summary["epochs"], key=key)
    _, _, best = load_checkpoint(best_path)
    assert best["epoch"] == best_epoch["epoch"] and best["extra"]["best_checkpoint_by"] == criterion
    assert best["extra"]["best_score"] == pytest.approx(key(best_epoch))


def test_rollout_selection_needs_a_rollout(pendulum_run, tmp_path):
    """Selecting best.pt by rollout error without a per-epoch rollout is refused up front."""
    _, cfg, _ = pendulum_run
    cfg = dataclasses.replace(cfg, rollout_eval=dataclasses.replace(cfg.rollout_eval, num_envs=0))
    with pytest.raises(ValueError, match="rollout_eval.num_envs"):
        train(cfg, tmp_path / "x", seed=0, progress=False)


def test_ground_truth_evaluation_has_zero_error(pendulum_run, device):
    """Evaluating the ground truth against itself gives exactly zero error (a sanity check of the evaluation), on every
    device (a CPU-only tensor in the metrics once failed every CUDA evaluation)."""
    results = evaluate_passive("PendulumWithContact", None, "ground-truth", 4, 6, 15, seed=500, contact_config=1,
                               device=device, progress=False)
    assert results["num_rollouts"] == 6 and len(results["error_vs_step"]["joint_position_error"]) == 15
    assert all(v == 0.0 for v in results["metrics"].values())


def test_evaluation_progress_counts_each_simulators_steps(capsys):
    """One bar per simulator, each counting its own steps: 2 batches of horizon 7 end at 14/14 twice (not 28)."""
    evaluate_passive("Cartpole", None, "ground-truth", 3, 6, 7, seed=0, progress=True)
    err = capsys.readouterr().err.replace("\r", "\n")
    finals = [line for line in err.splitlines() if "14/14 " in line]
    assert any(line.startswith("Cartpole ground truth:") for line in finals), err[-1000:]
    assert any(line.startswith("Cartpole ground-truth (evaluated):") for line in finals), err[-1000:]
    assert "/28 " not in err


def test_neural_evaluation_reports_errors(pendulum_run):
    """A (barely trained) neural model is evaluated on a ground configuration with finite, non-zero errors."""
    root, _, _ = pendulum_run
    results = evaluate_passive("PendulumWithContact", str(root / "logs/nn/best.pt"), "neural", 4, 4, 10, seed=500,
                               contact_config=2, progress=False)
    assert 0.0 < results["metrics"]["joint_position_error"] < 10.0


def test_rollout_check_never_starts_where_the_evaluation_does():
    """Choosing best.pt on the per-epoch rollout check must not peek at the test: with the evaluation's seed (500)
    the Cartpole's check would start exactly where a 2048-rollout evaluation's first rollouts start."""
    env = make_env("Cartpole", 4)
    check = env.sample_reset_states(64, torch.Generator().manual_seed(RolloutEvalConfig().seed))
    test = env.sample_reset_states(2048, torch.Generator().manual_seed(500))
    assert torch.equal(env.sample_reset_states(64, torch.Generator().manual_seed(500)), test[:64])
    assert not (check[:, None, :] == test[None, :, :]).all(dim=-1).any()


def test_learning_rate_decays_linearly():
    """lr goes from lr_start at the first step to lr_end at the last."""
    assert get_lr(0.0, 1e-3, 1e-4) == 1e-3
    assert abs(get_lr(1.0, 1e-3, 1e-4) - 1e-4) < 1e-12
    assert abs(get_lr(0.5, 1e-3, 1e-4) - 5.5e-4) < 1e-12


def test_learning_rate_warms_up_then_decays():
    """With a warm-up the rate rises from 0 to lr_start over that fraction, then decays over the rest."""
    assert get_lr(0.0, 1e-3, 1e-4, warmup=0.2) == 0.0
    assert abs(get_lr(0.1, 1e-3, 1e-4, warmup=0.2) - 5e-4) < 1e-12
    assert abs(get_lr(0.2, 1e-3, 1e-4, warmup=0.2) - 1e-3) < 1e-12
    assert abs(get_lr(0.6, 1e-3, 1e-4, warmup=0.2) - 5.5e-4) < 1e-12
    assert abs(get_lr(1.0, 1e-3, 1e-4, warmup=0.2) - 1e-4) < 1e-12
    with pytest.raises(ConfigError, match="lr_warmup"):
        TrainConfig(env_name="Cartpole", lr_warmup=1.0)


def test_one_evaluation_reports_every_standard_horizon(pendulum_run):
    """H = 120 reports H = 100 and 120 from one run, each the mean of the per-step curve up to that step."""
    root, _, _ = pendulum_run
    results = evaluate_passive("PendulumWithContact", str(root / "logs/nn/best.pt"), "neural", 4, 4, 120, seed=500,
                               contact_config=1, progress=False)
    assert list(results["metrics_by_horizon"]) == ["100", "120"] and results["initial_states"] == "task"
    curve = torch.tensor(results["error_vs_step"]["joint_position_error"], dtype=torch.float64)
    assert results["metrics_by_horizon"]["100"]["joint_position_error"] == pytest.approx(curve[:100].mean().item())
    assert results["metrics_by_horizon"]["120"] == results["metrics"]
    with pytest.raises(ValueError, match="--initial-states"):
        evaluate_passive("PendulumWithContact", None, "ground-truth", 1, 1, 1, seed=0, initial_states="reset")


def test_evaluation_std_is_the_spread_of_per_rollout_means(pendulum_run):
    """metrics_std is the population std over rollouts of each rollout's mean error, across batches (6 rollouts
    in batches of 4, the last one partly used), recomputed here from the same rollouts."""

    from nerd.evaluation import rollout, state_errors
    from nerd.neural_environment import NeuralEnvironment

    root, _, _ = pendulum_run
    model = str(root / "logs/nn/best.pt")
    results = evaluate_passive("PendulumWithContact", model, "neural", 4, 6, 12, seed=500, contact_config=1,
                               progress=False)
    env = make_env("PendulumWithContact", 4, contact_config=1)
    nenv = NeuralEnvironment.from_checkpoint(env, model, env_mode="ground-truth")
    generator = torch.Generator().manual_seed(500)
    means = []
    for keep in (4, 2):
        initial = env.sample_reset_states(4, generator)  # the default protocol's states
        gt, pred = rollout(nenv, initial, 12, "ground-truth"), rollout(nenv, initial, 12, "neural")
        means.append(state_errors(gt[1:, :keep], pred[1:, :keep], env)["joint_position_error"].double().mean(0))
    means = torch.cat(means)
    assert results["metrics"]["joint_position_error"] == pytest.approx(means.mean().item())
    assert results["metrics_std"]["joint_position_error"] == pytest.approx(means.std(correction=0).item())
    assert results["metrics_std"]["joint_position_error"] > 0
    examples = results["example_trajectories"]
    assert len(examples["ground_truth"]) == 3 and len(examples["ground_truth"][0]) == 13
    assert examples["state_names"] == ["joint_0 q [rad]", "joint_1 q [rad]"]


def test_micro_batches_give_the_whole_batchs_training_step(pendulum_run, tmp_path):
    """micro_batch_size accumulates the same gradient: the weights after a few steps match a whole-batch run."""
    root, cfg, _ = pendulum_run
    weights = []
    for micro in (None, 24):  # 64 windows = 24 + 24 + 16: uneven parts are weighted by their share
        run_cfg = dataclasses.replace(cfg, num_epochs=1, batches_per_epoch=3, micro_batch_size=micro,
                                      best_checkpoint_by="valid_loss",
                                      rollout_eval=dataclasses.replace(cfg.rollout_eval, num_envs=0))
        train(run_cfg, tmp_path / f"micro_{micro}", seed=0, progress=False)
        weights.append(load_checkpoint(tmp_path / f"micro_{micro}" / "nn" / "last.pt")[0].state_dict())
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, atol=1e-5, rtol=1e-4, msg=name)


def test_weighted_loss_scales_each_windows_error(pendulum_run):
    """The weighted loss is the mean of each window's error times its weight: equal weights give the plain loss,
    and a tiny weight on half the batch leaves the gradient of the other half alone."""
    root, cfg, _ = pendulum_run
    model = load_checkpoint(root / "logs" / "nn" / "last.pt")[0]
    inputs, target = TrajectoryWindows(cfg.dataset.valid, 10).get_batch(torch.arange(0, 400, 50))
    plain = model.loss(inputs, target)
    torch.testing.assert_close(model.loss(inputs, target, torch.ones(8)), plain)
    half = {k: v[:4] for k, v in inputs.items()}, target[:4]
    weights = torch.tensor([1.0] * 4 + [1e-9] * 4)
    torch.testing.assert_close(model.loss(inputs, target, weights), model.loss(*half) / 2)
    grads = []
    for loss in (lambda: model.loss(inputs, target, weights) * 2, lambda: model.loss(*half)):
        model.zero_grad()
        loss().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1])
    with pytest.raises(ValueError, match=r"weights must have shape \(8,\)"):
        model.loss(inputs, target, torch.ones(3))


def test_dataset_weights_need_one_positive_weight_per_entry():
    base = {"env_name": "PendulumWithContact", "model": TINY_MODEL}
    with pytest.raises(ConfigError, match="'dataset.train_weights': 1 weights for the 2 entries"):
        from_dict(TrainConfig, {**base, "dataset": {"train": ["a.hdf5", "b.hdf5"], "train_weights": [1.0]}})
    with pytest.raises(ConfigError, match="'dataset.valid_weights': weights must be positive"):
        from_dict(TrainConfig, {**base, "dataset": {"valid": "v.hdf5", "valid_weights": [-1.0]}})
    with pytest.raises(ConfigError, match="train_weights"):
        from_dict(TrainConfig, {**base, "dataset": {"train": "a.hdf5", "train_weights": "heavy"}})


def test_a_diverged_rollout_check_does_not_end_the_run(pendulum_run, tmp_path, monkeypatch):
    """An epoch whose rollout check blows up (an under-trained model) is recorded as diverged and kept out of
    best.pt; training goes on to the next epoch."""
    import nerd.evaluation as evaluation
    from nerd.errors import RolloutDivergedError
    from nerd.training import ROLLOUT_DIVERGED

    _, cfg, _ = pendulum_run
    calls = []

    def diverges_first(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise RolloutDivergedError("NeRD rollout produced non-finite states in envs [2]")
        return evaluate_passive(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate_passive", diverges_first)
    summary = train(cfg, tmp_path / "d", seed=0, progress=False)
    first, second = summary["epochs"]
    assert first[ROLLOUT_DIVERGED] == float("inf") and "joint_position_error" not in first
    assert second["joint_position_error"] < float("inf")
    _, _, best = load_checkpoint(tmp_path / "d/nn/best.pt")
    assert best["epoch"] == 1


def test_metric_units_follow_what_each_metric_scores():
    """Joint errors take the unit of the joints they score (a "position" in the name is not a length): the Ant's
    and Franka's joint errors are in rad, positions and end effectors in m."""
    from nerd.evaluation import metric_units

    assert metric_units(make_env("Cartpole", 1)) == {"cart_position_error": "m", "pole_angle_error": "rad"}
    assert metric_units(make_env("Ant", 1)) == {"base_position_error": "m", "base_orientation_error": "rad",
                                               "joint_position_error": "rad"}
    assert metric_units(make_env("Franka", 1)) == {"joint_position_error": "rad", "end_effector_position_error": "m"}


def test_joint_limit_inputs_train_from_a_release_input_model(tmp_path, monkeypatch):
    """joint_limit_inputs: a fine-tune from a model without the group starts from its weights (same first
    validation state as the source, within training noise) and its checkpoint drives the Cartpole in neural mode;
    flipping the option on resume, or asking it of a robot without declared limits, is a one-line error. The same
    holds for joint_limit_lookahead on top of it."""
    for split, seed, n in (("train", 0, 600), ("valid", 1, 300)):
        generate_dataset(GenerationConfig("Cartpole", n, trajectory_length=30, num_envs=20, seed=seed,
                                          initial_states="limits"), tmp_path / f"{split}.hdf5", progress=False)
    cfg = from_dict(TrainConfig, {
        "env_name": "Cartpole", "model": TINY_MODEL, "num_epochs": 1, "batches_per_epoch": 10, "batch_size": 32,
        "valid_batches": 3, "rollout_eval": {"num_envs": 2, "horizon": 5},
        "dataset": {"train": str(tmp_path / "train.hdf5"), "valid": str(tmp_path / "valid.hdf5")},
    })
    train(cfg, tmp_path / "plain", seed=0, progress=False)
    limits = dataclasses.replace(cfg, joint_limit_inputs=True, lr_start=1e-9, lr_end=1e-9)
    ahead = dataclasses.replace(limits, joint_limit_lookahead=True)
    # plain -> joint_limits -> joint_limit_lookahead, each run started from the one before.
    for source, run, run_cfg, key, group in (("plain", "limits", limits, "joint_limit_inputs", "joint_limits"),
                                             ("limits", "ahead", ahead, "joint_limit_lookahead",
                                              "joint_limit_lookahead")):
        summary = train(run_cfg, tmp_path / run, seed=0, init_from=tmp_path / f"{source}/nn/last.pt", progress=False)
        model, sig, _ = load_checkpoint(tmp_path / f"{run}/nn/last.pt")
        source_model, source_sig, _ = load_checkpoint(tmp_path / f"{source}/nn/last.pt")
        assert sig.joint_limits == ((0, -4.0, 4.0),)
        assert list(model.input_groups) == [*source_model.input_groups, group]
        # At a vanishing learning rate the widened model predicts what its source did (same validation batches:
        # the run validates with seed + 1).
        source_loss = validation_loss(source_model, TrajectoryWindows(cfg.dataset.valid, 10,
                                                                      joint_limits=source_sig.joint_limits), 32, 3, 1)
        assert summary["epochs"][0]["valid_loss"] == pytest.approx(source_loss, rel=1e-3)
        nenv = NeuralEnvironment.from_checkpoint(make_env("Cartpole", 2), tmp_path / f"{run}/nn/last.pt")
        assert nenv.signature == sig
        nenv.step(torch.zeros(2, 1))
        assert torch.isfinite(nenv.get_states()).all()
        with pytest.raises(ConfigError, match=f"{key} True -> False"):
            train(dataclasses.replace(run_cfg, num_epochs=2, **{key: False}), tmp_path / run, resume=True,
                  progress=False)
    assert sig.joint_limit_lookahead == pytest.approx(1 / 60)
    # A checkpoint that reads other limits gains the look-ahead only to be refused, not relabelled.
    model, limits_sig, payload = load_checkpoint(tmp_path / "limits/nn/last.pt")
    other = dataclasses.replace(limits_sig, joint_limits=((0, -3.0, 3.0),))
    save_checkpoint(tmp_path / "other_limits.pt", model, other, payload["config"],
                    history_length=payload["history_length"])
    with pytest.raises(UserError, match=r"joint_limits \(\(0, -3.0, 3.0\),\) vs \(\(0, -4.0, 4.0\),\)"):
        train(ahead, tmp_path / "from_other_limits", seed=0, init_from=tmp_path / "other_limits.pt", progress=False)
    with pytest.raises(UserError, match="PendulumWithContact declares no joint limits"):
        train(dataclasses.replace(limits, env_name="PendulumWithContact"), tmp_path / "pendulum", progress=False)
    with pytest.raises(ConfigError, match="'joint_limit_lookahead': needs joint_limit_inputs: true"):
        dataclasses.replace(cfg, joint_limit_lookahead=True)
    # Without the engine (a GPU machine with torch alone) the limits are those of the checkpoint the run continues.
    def no_engine(env_name):
        raise ModuleNotFoundError("No module named 'newton'", name="newton")

    monkeypatch.setattr(resume_module, "robot_joint_limits", no_engine)
    engine_free = dataclasses.replace(ahead, rollout_eval=RolloutEvalConfig(num_envs=0),
                                      best_checkpoint_by="valid_loss")
    train(engine_free, tmp_path / "no_engine", seed=0, init_from=tmp_path / "ahead/nn/last.pt", progress=False)
    train(dataclasses.replace(engine_free, num_epochs=2), tmp_path / "no_engine", resume=True, progress=False)
    model, no_engine_sig, payload = load_checkpoint(tmp_path / "no_engine/nn/last.pt")
    assert no_engine_sig == sig and payload["epoch"] == 1
    with pytest.raises(UserError, match="joint limits come from its environment, which needs newton"):
        train(engine_free, tmp_path / "no_engine_scratch", seed=0, progress=False)
    with pytest.raises(UserError, match="needs newton"):  # a checkpoint that reads no limits cannot supply them
        train(engine_free, tmp_path / "no_engine_plain", seed=0, init_from=tmp_path / "plain/nn/last.pt",
              progress=False)
