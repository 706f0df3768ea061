"""Nothing lost, nothing misreported: the failure cases of the reliability probe (docs/reliability.md)."""

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from nerd.config import ConfigError, apply_overrides, from_dict
from nerd.datasets.hdf5 import DatasetError, TrajectoryWriter
from nerd.datasets.windows import TrajectoryWindows
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.generation import GenerationConfig, generate_dataset
from nerd.models.transformer import TransformerConfig
from nerd.run_dir import write_text_atomic
from nerd.training import TrainConfig
from tests.helpers import REPO


def test_second_writer_of_the_same_output_fails_without_harming_the_first(tmp_path):
    """A second generation into the same file gets one error and leaves the first one's partial file intact."""
    path = tmp_path / "d.hdf5"
    first = TrajectoryWriter(path, {"states": (2,)}, 3, {"env_name": "x"})
    first.append({"states": np.ones((4, 3, 2), dtype=np.float32)})
    with pytest.raises(DatasetError, match="another process is writing"):
        TrajectoryWriter(path, {"states": (2,)}, 3, {"env_name": "x"})
    assert first.close() == path
    with h5py.File(path) as f:
        assert f["data/states"].shape == (4, 3, 2) and f.attrs["complete"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]  # no .partial, no .lock left behind


def test_non_finite_dataset_is_refused_naming_the_field(tmp_path):
    """A dataset holding NaN fails on load with the field and the count, before any training."""
    path = tmp_path / "c.hdf5"
    generate_dataset(GenerationConfig("Cartpole", 200, trajectory_length=20, num_envs=10), path, progress=False)
    with h5py.File(path, "r+") as f:
        data = f["data/next_states"][...]
        data[3, 5, 1] = np.nan
        data[4, 0, 0] = np.inf
        f["data/next_states"][...] = data
    with pytest.raises(DatasetError, match=r"field 'next_states' holds 2 non-finite values"):
        TrajectoryWindows(path, 10)


def test_yaml_exponent_floats_are_numbers_and_misleading_values_are_refused():
    """lr_start: 1e-3 (a string to PyYAML) is accepted; sizes and counts that would mislead are one-line errors."""
    import yaml

    data = yaml.safe_load("env_name: Cartpole\nlr_start: 1e-3\nlr_end: 5e-5\n")
    assert isinstance(data["lr_start"], str)  # the YAML 1.1 quirk this guards against
    cfg = from_dict(TrainConfig, data)
    assert cfg.lr_start == 1e-3 and cfg.lr_end == 5e-5
    for key, value, message in (("batch_size", 0, "'batch_size': must be >= 1"),
                                ("valid_batches", 0, "'valid_batches'"), ("num_epochs", 0, "'num_epochs'"),
                                ("grad_clip", -1.0, "'grad_clip': must be > 0"),
                                ("history_length", 0, "'history_length'"), ("lr_start", "nan", "finite")):
        with pytest.raises(ConfigError, match=message):
            from_dict(TrainConfig, {"env_name": "Cartpole", key: value})
    with pytest.raises(ConfigError, match=r"'model.transformer.n_layer': must be >= 1"):
        from_dict(TrainConfig, {"env_name": "Cartpole", "model": {"transformer": {"n_layer": 0}}})
    with pytest.raises(ConfigError, match="n_head"):
        TransformerConfig(n_head=0)
    with pytest.raises(ConfigError, match="does not parse"):
        apply_overrides({}, ["model.type=[unclosed"])


def test_nan_or_misshaped_actions_are_refused_in_both_modes():
    """NaN actions raise before the solver (which would silently return NaN states); wrong shapes name the shape."""
    from nerd.neural_environment import NeuralEnvironment

    env = make_env("Cartpole", 2)
    env.reset()
    before = env.get_states()
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(torch.tensor([[0.1], [float("nan")]]))
    torch.testing.assert_close(env.get_states(), before)
    with pytest.raises(ValueError, match=r"actions must have shape \(2, 1\), got \(2, 2\)"):
        env.step(torch.zeros(2, 2))
    nenv = NeuralEnvironment(env, None, env_mode="ground-truth")
    with pytest.raises(ValueError, match="NaN or inf"):
        nenv.step(torch.full((2, 1), float("nan")))
    with pytest.raises(ValueError, match="actions must have shape"):
        nenv.step(torch.zeros(3, 1))


def test_failed_atomic_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A write that fails half-way removes its .tmp file and leaves the old file as it was."""
    target = write_text_atomic(tmp_path / "r.json", "old")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "new")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_sigterm_during_generation_leaves_no_partial_file(tmp_path):
    """SIGTERM is handled like Ctrl-C: the generator exits 143 and removes its .partial and .lock files."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "generate/generate_dataset.py"), "--env-name", "Cartpole", "--num-transitions",
         "50000000", "--num-envs", "64", "--dataset-dir", str(tmp_path), "--dataset-name", "big"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 300  # start-up (imports, kernel loads) is slow on a loaded 2-core machine
    while not (tmp_path / "big.hdf5.partial").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 143, err[-2000:]
    assert "terminated" in err
    assert list(tmp_path.iterdir()) == []


def test_a_stop_swallowed_by_a_finalizer_or_turned_into_another_error_still_stops(capsys):
    """Python prints and drops an exception raised in a finalizer: a Ctrl-C (or SIGTERM) that lands there is
    delivered again until it stops the command (exit 130; the run must not go on to exit 0). And an error a library
    raises while the process unwinds from a stop (a half-drawn figure's ValueError) still ends it as that stop (143)."""
    from nerd.cli import run_main

    # What run_main must put back: pytest's handlers, or SIG_IGN where the suite was started in the background.
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # its KeyboardInterrupt is raised, printed and dropped here

    def swallowing():
        Finalized()
        time.sleep(5)  # delivered again within a second
        print("went on")

    started = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        run_main(swallowing)
    out, err = capsys.readouterr()
    assert stop.value.code == 130 and "went on" not in out and "interrupted" in err
    assert time.monotonic() - started < 4

    def masked():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:
            raise ValueError("Invalid bounding box") from None

    with pytest.raises(SystemExit) as stop:
        run_main(masked)
    assert stop.value.code == 143 and "terminated" in capsys.readouterr().err
    assert {signum: signal.getsignal(signum) for signum in before} == before  # the caller's handlers are back


def test_a_lock_whose_file_its_holder_removed_meanwhile_is_taken_again(tmp_path, monkeypatch):
    """A process that opened the lock file just before its holder released it (release removes the file) must not
    lock the removed file, or a third process, creating a new one, would run beside it."""
    import fcntl

    from nerd.run_dir import ExclusiveLock

    path = tmp_path / "run.lock"
    holder = ExclusiveLock(path, "busy")
    real_flock = fcntl.flock

    def released_meanwhile(fd, operation):
        if holder._fd is not None:
            holder.release()  # between this process's open and its lock
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", released_meanwhile)
    second = ExclusiveLock(path, "busy")
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert path.exists()
    with pytest.raises(UserError, match="busy"):
        ExclusiveLock(path, "busy")
    second.release()


def test_train_command_refuses_before_touching_a_previous_run(tmp_path):
    """--device cuda without a GPU, the removed --checkpoint, or a run directory without --overwrite: one error
    before anything in the old run changes."""
    from nerd.scripts.train import main

    run = tmp_path / "run"
    (run / "nn").mkdir(parents=True)
    (run / "nn/last.pt").write_text("old")
    (run / "config.yaml").write_text("env_name: Cartpole\n")
    cfg = str(REPO / "cfg/train/Cartpole/cpu.yaml")
    cases = [(["--cfg", cfg, "--overwrite", "--device", "cuda:7"], "--device"),
             (["--cfg", cfg, "--checkpoint", str(run / "nn/last.pt")], "use --resume .* or --init-from"),
             (["--cfg", cfg, "--init-from", str(run / "nn/last.pt")], "holds a run; pass --overwrite"),
             (["--resume", "--overwrite"], "pick one")]
    for args, message in cases:
        with pytest.raises((UserError, FileExistsError), match=message):
            main(["--logdir", str(run), *args])
        assert (run / "nn/last.pt").read_text() == "old" and (run / "config.yaml").exists()


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> Path:
    """A complete 10-trajectory Cartpole dataset."""
    path = tmp_path_factory.mktemp("data") / "d.hdf5"
    generate_dataset(GenerationConfig("Cartpole", 200, trajectory_length=20, num_envs=10), path, progress=False)
    return path


def test_damaged_datasets_are_one_error_naming_what_is_wrong(small_dataset, tmp_path):
    """A field with fewer trajectories or steps than 'states', a missing attribute: one DatasetError each, also in
    the summary and plot that visualize_dataset.py prints."""
    from nerd.datasets.summary import summarize_dataset

    def damaged(name, edit):
        path = tmp_path / f"{name}.hdf5"
        path.write_bytes(small_dataset.read_bytes())
        with h5py.File(path, "r+") as f:
            edit(f)
        return path

    def shorten(f, field, shape):
        data = f[f"data/{field}"][...]
        del f[f"data/{field}"]
        f["data"].create_dataset(field, data=data[tuple(slice(0, n) for n in shape)])

    cases = [
        (damaged("fewer", lambda f: shorten(f, "joint_acts", (7, 20))), r"'joint_acts' has shape \(7, 20, 2\).*10"),
        (damaged("shorter", lambda f: shorten(f, "next_states", (10, 15))), r"'next_states' has shape \(10, 15, 4\)"),
        (damaged("attr", lambda f: f.attrs.__delitem__("joint_act_dim")), "lacks the attributes joint_act_dim"),
    ]
    for path, message in cases:
        for read in (lambda p: TrajectoryWindows(p, 10), summarize_dataset):
            with pytest.raises(DatasetError, match=message):
                read(path)


def test_visualize_refuses_to_overwrite_its_plot(small_dataset, tmp_path):
    """An existing PNG is kept without --overwrite; the plot can never replace the dataset itself."""
    from nerd.scripts.visualize import main

    png = tmp_path / "d.png"
    png.write_text("keep me")
    with pytest.raises(FileExistsError, match="pass --overwrite"):
        main(["--dataset", str(small_dataset), "--png", str(png)])
    assert png.read_text() == "keep me"
    with pytest.raises(UserError, match="give a .png path"):
        main(["--dataset", str(small_dataset), "--png", str(small_dataset), "--overwrite"])
    main(["--dataset", str(small_dataset), "--png", str(png), "--overwrite"])
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_result_files_never_overwrite_their_siblings(tmp_path):
    """--output must name a .json file, so the PNG or Markdown written beside it is a different file."""
    from nerd.scripts.batch_eval import main as batch_eval
    from nerd.scripts.eval_passive import main as eval_passive

    with pytest.raises(UserError, match=r"--output .*res.png: give a .json path \(the .png file"):
        eval_passive(["--env-name", "Cartpole", "--env-mode", "ground-truth", "--output", str(tmp_path / "res.png")])
    with pytest.raises(UserError, match=r"t.md: give a .json path \(the .png file"):
        batch_eval(["--eval-cfg", str(REPO / "cfg/eval/cartpole_swingup_shipped.yaml"), "--output",
                    str(tmp_path / "t.md")])
    (tmp_path / "r.png").write_text("keep")
    with pytest.raises(FileExistsError, match="r.png already exists"):
        eval_passive(["--env-name", "Cartpole", "--env-mode", "ground-truth", "--output", str(tmp_path / "r.json")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.png"]


def test_giant_requests_are_refused_up_front_with_what_they_need(tmp_path, monkeypatch):
    """10^9 transitions on a 10 GiB disk, 10^9 rollouts or envs with 16 GiB of memory: one error stating the need."""
    import shutil

    import nerd.resources as resources
    from nerd.evaluation import evaluate_passive

    monkeypatch.setattr(resources, "available_memory", lambda device: 16 * 2**30)
    monkeypatch.setattr(resources.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(0, 0, 10 * 2**30))
    with pytest.raises(UserError, match=r"1,000,000,000 transitions needs about .* GiB of disk, 10.0 GiB is free"):
        generate_dataset(GenerationConfig("Cartpole", 10**9, trajectory_length=100, num_envs=64), tmp_path / "g.hdf5",
                         progress=False)
    with pytest.raises(UserError, match=r"generating with 1000000000 envs .* needs at least .* of memory"):
        generate_dataset(GenerationConfig("Cartpole", 10**11, trajectory_length=100, num_envs=10**9),
                         tmp_path / "g.hdf5", progress=False)
    assert list(tmp_path.iterdir()) == []
    for num_envs, num_rollouts in ((64, 10**9), (10**9, 10**9)):
        with pytest.raises(UserError, match=r"needs at least .* [GT]iB of memory on cpu, 16.0 GiB is available"):
            evaluate_passive("Cartpole", None, "ground-truth", num_envs, num_rollouts, 1000, seed=0, progress=False)


# ------------------------------------------------------------------------------------------------------------------
# The second probe: concurrent runs, interrupted overwrites, values that mislead, silent NaN.

def tiny_train_config(dataset: Path, **changes) -> TrainConfig:
    data = {"env_name": "Cartpole", "batch_size": 16, "num_epochs": 1, "batches_per_epoch": 2, "valid_batches": 1,
            "model": {"type": "transformer", "transformer": {"n_layer": 1, "n_head": 2, "n_embd": 16,
                                                             "block_size": 16, "head_hidden": [16]}},
            "rollout_eval": {"num_envs": 2, "horizon": 5},
            "dataset": {"train": str(dataset), "valid": str(dataset)}}
    data.update(changes)
    return from_dict(TrainConfig, data)


def test_a_second_training_in_the_same_run_directory_is_refused(small_dataset, tmp_path):
    """While one process trains in a directory, another one's start is one error; nothing is written."""
    from nerd.run_dir import ExclusiveLock
    from nerd.training import train

    held = ExclusiveLock(tmp_path / ".run.lock", "held")
    try:
        with pytest.raises(UserError, match="another process is training in"):
            train(tiny_train_config(small_dataset), tmp_path / "run", progress=False)
    finally:
        held.release()
    assert not (tmp_path / "run").exists()


def test_a_dataset_finished_meanwhile_at_the_same_name_is_never_replaced(tmp_path):
    """The existence check is repeated under the lock when the file is published: a file another generation
    finished while this one ran stays as it was, and this one fails with one error."""
    path = tmp_path / "d.hdf5"
    writer = TrajectoryWriter(path, {"states": (2,)}, 3, {"env_name": "x"})
    writer.append({"states": np.ones((4, 3, 2), dtype=np.float32)})
    path.write_text("finished by the other process")
    with pytest.raises(DatasetError, match="written by another process"):
        writer.close()
    writer.abort()
    assert path.read_text() == "finished by the other process"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.hdf5"]
    with pytest.raises(DatasetError, match="already exists"):
        TrajectoryWriter(path, {"states": (2,)}, 3, {"env_name": "x"})
    TrajectoryWriter(path, {"states": (2,)}, 3, {"env_name": "x"}, overwrite=True).close()
    assert h5py.is_hdf5(path)


def test_a_result_written_meanwhile_by_another_run_is_never_replaced(tmp_path):
    """Without --overwrite a result file is published only if nobody wrote it meanwhile (two evaluations with one
    --output: the second fails instead of both reporting 'wrote')."""
    from nerd.rl.batch_eval import write_table

    target = write_text_atomic(tmp_path / "r.json", "first", overwrite=False)
    with pytest.raises(FileExistsError, match="written by another process"):
        write_text_atomic(target, "second", overwrite=False)
    assert target.read_text() == "first" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    table = {"robot": "Cartpole", "task": "swingup", "simulators": [], "rows": [], "config": {"seed": 0}}
    with pytest.raises(FileExistsError):
        write_table(table, target, overwrite=False)


def test_an_overwrite_killed_before_its_first_checkpoint_gives_the_old_run_back(tmp_path):
    """An --overwrite killed after its epoch check but before nn/last.pt: the next start (or --resume) puts the
    old run back instead of deleting it."""
    from nerd.run_dir import recover_previous_run
    from nerd.training import RUN_CHECKPOINT, RUN_DIR_ENTRIES

    run = tmp_path / "run"
    (run / ".previous_run" / "nn").mkdir(parents=True)
    (run / ".previous_run" / "nn" / "last.pt").write_text("old run")
    (run / ".previous_run" / "config.yaml").write_text("old")
    (run / "nn").mkdir()
    (run / "nn" / "epoch_check.pt").write_text("new run's first check")
    (run / "config.yaml").write_text("new")
    assert recover_previous_run(run, RUN_DIR_ENTRIES, RUN_CHECKPOINT)
    assert (run / "nn/last.pt").read_text() == "old run" and (run / "config.yaml").read_text() == "old"
    assert not (run / ".previous_run").exists() and not (run / "nn/epoch_check.pt").exists()


def test_resume_names_changed_settings_and_refuses_a_changed_selection_rule(small_dataset):
    from nerd.training import check_resume_config, resume_changes

    old = tiny_train_config(small_dataset)
    payload = {"config": dataclass_dict(old), "history_length": old.history_length}
    new = tiny_train_config(small_dataset, lr_start=3e-4, batch_size=32)
    assert resume_changes(new, payload) == "batch_size 16 -> 32, lr_start 0.001 -> 0.0003"
    check_resume_config(new, old.model, payload)
    weighted = tiny_train_config(small_dataset)
    weighted.dataset = dataclasses.replace(weighted.dataset, train=[str(small_dataset)], train_weights=[2.0])
    assert resume_changes(weighted, payload) == "dataset.train_weights None -> [2.0]"
    check_resume_config(weighted, old.model, payload)
    with pytest.raises(ConfigError, match="best_checkpoint_by rollout -> valid_loss"):
        check_resume_config(tiny_train_config(small_dataset, best_checkpoint_by="valid_loss"), old.model, payload)


def dataclass_dict(cfg) -> dict:
    from nerd.config import to_dict

    return to_dict(cfg)


def test_values_that_do_not_mean_what_they_say_are_refused_or_named(small_dataset, tmp_path, capsys):
    from nerd.checkpoint import read_checkpoint
    from nerd.training import train

    for override, key in ((["model.type=mlp", "model.mlp.hidden=[-5]"], "model.mlp.hidden[0]"),
                          (["model.type=gru", "model.rnn.hidden_size=-1"], "model.rnn.hidden_size"),
                          (["micro_batch_size=600"], "micro_batch_size")):
        data = apply_overrides({"env_name": "Cartpole", "batch_size": 512}, override)
        with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
            from_dict(TrainConfig, data)
    # 10 trajectories of 20 steps hold 110 windows of 10.
    with pytest.raises(ConfigError, match="'batch_size': 100000000 exceeds the 110 windows"):
        train(tiny_train_config(small_dataset, batch_size=100_000_000), tmp_path / "big", progress=False)
    summary = train(tiny_train_config(small_dataset, batches_per_epoch=200), tmp_path / "run", progress=False)
    assert "batches_per_epoch 200 exceeds the 7 batches" in capsys.readouterr().out
    # A resumed finished run reports the whole run's time, not the resume's.
    again = train(tiny_train_config(small_dataset, batches_per_epoch=200), tmp_path / "run", resume=True,
                  progress=False)
    stored = read_checkpoint(tmp_path / "run/nn/last.pt")["extra"]["train_seconds"]
    assert sum(e["epoch_seconds"] for e in summary["epochs"]) <= stored <= again["train_seconds"]
    # The rollout check's size error names the config keys, not another command's flags.
    with pytest.raises(UserError, match="lower rollout_eval.num_envs or rollout_eval.horizon"):
        train(tiny_train_config(small_dataset, rollout_eval={"num_envs": 10**7, "horizon": 10**4}),
              tmp_path / "huge", progress=False)


def test_a_dataset_of_another_frame_length_is_refused(small_dataset, tmp_path):
    from nerd.training import train

    other = tmp_path / "other.hdf5"
    other.write_bytes(small_dataset.read_bytes())
    with h5py.File(other, "r+") as f:
        f.attrs["frame_dt"] = 0.01
    with pytest.raises(UserError, match="frames are 0.01 s, but Cartpole steps 0.0166667 s"):
        train(tiny_train_config(other), tmp_path / "run", progress=False)
    with pytest.raises(DatasetError, match="a model learns one frame length"):
        TrajectoryWindows([small_dataset, other], 10)


def test_averaging_a_checkpoint_with_non_finite_weights_is_refused(tmp_path):
    from nerd.checkpoint import average_checkpoints, save_checkpoint
    from nerd.features import signature_of_env
    from nerd.models import ModelConfig
    from nerd.models.nerd_model import NeRDModel

    sig = signature_of_env(make_env("Cartpole", 1))
    cfg = ModelConfig(type="transformer", transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16,
                                                                        block_size=16, head_hidden=[16]))
    model = NeRDModel(sig.input_groups, sig.target_dim, cfg)
    save_checkpoint(tmp_path / "a.pt", model, sig, {"history_length": 10}, history_length=10)
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    save_checkpoint(tmp_path / "b.pt", model, sig, {"history_length": 10}, history_length=10)
    with pytest.raises(UserError, match="b.pt holds non-finite weights"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_huge_torques_and_nan_states_are_errors_in_the_ground_truth():
    """Finite torques that blow the solver up, and NaN written into a state, are errors, not silent NaN states."""
    from nerd.errors import RolloutDivergedError
    from nerd.neural_environment import NeuralEnvironment

    env = make_env("Cartpole", 2)
    with pytest.raises(RolloutDivergedError, match="non-finite states"):
        env.step_with_joint_act(torch.full((2, env.act_dim), 1e30))
    env = make_env("Cartpole", 2)
    nenv = NeuralEnvironment(env, None, env_mode="ground-truth")
    with pytest.raises(RolloutDivergedError, match="non-finite states"):
        nenv.step_with_joint_act(torch.full((2, env.act_dim), 1e30))
    states = torch.zeros(2, env.state_dim)
    states[1, 0] = float("nan")
    with pytest.raises(UserError, match=r"states contain NaN or inf \(rows \[1\]\)"):
        make_env("Cartpole", 2).set_states(states)


def test_small_command_line_mistakes_are_one_line_errors(tmp_path):
    """A dataset name that is a path, a playback --output that is not JSON, a model path that is a directory."""
    from nerd.checkpoint import read_checkpoint
    from nerd.scripts.generate import main as generate_main
    from nerd.scripts.rl import main as rl_main

    with pytest.raises(UserError, match="--dataset-name must be a file name"):
        generate_main(["--env-name", "Cartpole", "--num-transitions", "100", "--dataset-dir", str(tmp_path),
                       "--dataset-name", "../../x"])
    with pytest.raises(UserError, match="give a .json path"):
        rl_main(["--rl-cfg", str(REPO / "cfg/rl/Cartpole/swingup_cpu.yaml"), "--env-mode", "ground-truth",
                 "--playback", str(tmp_path / "p.pth"), "--output", str(tmp_path / "p.png")])
    with pytest.raises(UserError, match="is a directory, not a checkpoint file"):
        read_checkpoint(tmp_path)


def test_a_full_disk_is_one_error_and_leaves_nothing_behind(tmp_path, monkeypatch):
    """Generation stops before HDF5 writes to a disk that cannot hold the next batch (HDF5 can crash on a full
    disk) and removes its partial and lock files; a checkpoint that cannot be written leaves the previous one as it
    was and no temporary file."""
    import collections

    from nerd.checkpoint import save_checkpoint
    from nerd.datasets import hdf5
    from nerd.features import signature_of_env
    from nerd.models import ModelConfig
    from nerd.models.nerd_model import NeRDModel

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(hdf5.shutil, "disk_usage", lambda path: usage(10**6, 9 * 10**5, 10**5))
    with pytest.raises(DatasetError, match="is nearly full"):
        generate_dataset(GenerationConfig("Cartpole", 200, trajectory_length=20, num_envs=10), tmp_path / "d.hdf5",
                         progress=False)
    assert list(tmp_path.iterdir()) == []

    sig = signature_of_env(make_env("Cartpole", 1))
    cfg = ModelConfig(type="transformer", transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16,
                                                                        block_size=16, head_hidden=[16]))
    model = NeRDModel(sig.input_groups, sig.target_dim, cfg)
    path = save_checkpoint(tmp_path / "last.pt", model, sig, {}, history_length=10)
    before = path.read_bytes()

    def full(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(UserError, match="could not write .*last.pt .*No space left on device.*is intact"):
        save_checkpoint(path, model, sig, {}, history_length=10, epoch=1)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_a_model_too_large_for_memory_is_one_error_naming_its_section(small_dataset, tmp_path):
    """n_embd = 32768 and block_size = 1e8 are measured on torch's meta device and refused before anything is
    allocated (they ended in an allocator traceback)."""
    from nerd.training import train

    model = {"type": "transformer", "transformer": {"n_layer": 3, "n_head": 4, "n_embd": 32768,
                                                    "block_size": 100_000_000, "head_hidden": [16]}}
    with pytest.raises(UserError, match=r"a model of [\d,]+ parameters .* lower the model's sizes \(config section "
                                        r"'model.transformer'\)"):
        train(tiny_train_config(small_dataset, model=model), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_the_rollout_check_scores_the_epochs_own_weights_without_a_file(small_dataset, tmp_path, monkeypatch):
    """The per-epoch rollout check steps a copy of the weights in memory (a file in the run directory could be
    another process's): it is handed a model, and its score equals the saved checkpoint's evaluated afresh."""
    from nerd import evaluation
    from nerd.models.nerd_model import NeRDModel
    from nerd.training import train

    handed = []
    original = evaluation.evaluate_passive

    def spy(env_name, model_path, *args, **kwargs):
        handed.append(type(model_path))
        return original(env_name, model_path, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate_passive", spy)
    summary = train(tiny_train_config(small_dataset), tmp_path / "run", progress=False)
    assert handed == [NeRDModel]
    again = original("Cartpole", str(tmp_path / "run/nn/last.pt"), "neural", 2, 2, 5, 100, progress=False)
    for name, value in again["metrics"].items():
        assert summary["epochs"][-1][name] == pytest.approx(value, rel=1e-6), name
