"""Nothing lost, nothing misreported: the failure cases of the reliability probe (docs/reliability.md)."""

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

REPO = Path(__file__).resolve().parents[2]


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
    with pytest.raises(UserError, match=r"t.md: give a .json path \(the .md file"):
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
