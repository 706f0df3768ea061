"""studies/torque_usage/torque_usage.py: torque-usage statistics of datasets (known values) and of a shipped policy."""

import json
from pathlib import Path

import h5py
import numpy as np

from nerd.generation import GenerationConfig, generate_dataset
from tests.helpers import REPO, error_lines, run_script

SCRIPT = "studies/torque_usage/torque_usage.py"
RL_CFG = str(REPO / "cfg/rl/Cartpole/swingup_cpu.yaml")


def write_torques(path: Path, per_joint: list[float]) -> None:
    """A Cartpole dataset of two trajectories x len(per_joint) frames whose torques are replaced by known values,
    the same on both joints, and whose joint speeds (the last two state entries) by a hundredth of them."""
    length = len(per_joint)
    generate_dataset(GenerationConfig("Cartpole", 2 * length, trajectory_length=length, num_envs=2), path,
                     progress=False)
    acts = np.stack([np.array(per_joint), -2.0 * np.array(per_joint)], axis=-1)  # joint 1: twice the scale
    with h5py.File(path, "r+") as f:
        f["data/joint_acts"][...] = np.stack([acts, acts]).astype(np.float32)
        f["data/states"][..., 2:] = np.stack([acts, acts]).astype(np.float32) / 100.0


def test_dataset_stats_are_relative_to_each_joints_maximum(tmp_path, monkeypatch, capsys):
    write_torques(tmp_path / "a.hdf5", [0.0, 25.0, 60.0, 95.0, 100.0])
    write_torques(tmp_path / "b.hdf5", [10.0, -10.0, 10.0, -10.0, 10.0])
    code, out, err = run_script(SCRIPT, "--rl-cfg", RL_CFG, "--datasets",
                                str(tmp_path / "a.hdf5"), str(tmp_path / "b.hdf5"), "--output",
                                str(tmp_path / "usage.json"), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "usage.json").read_text())
    assert np.allclose(result["limit"], [100.0, 200.0])
    a, b = result["rows"]
    assert np.isclose(a["mean_abs_over_limit"], 0.56) and a["share_above_0.5"] == 0.6 and a["share_above_0.9"] == 0.4
    assert np.isclose(b["mean_abs_over_limit"], 0.1) and b["share_above_0.5"] == 0.0
    # a: only 0 -> 25 changes sign, once in 4 frame pairs; b alternates every frame. Pairs never span trajectories.
    assert a["sign_change_rate"] == 0.25 and b["sign_change_rate"] == 1.0
    # per joint, in the data's own units: joint 1 pushes and moves twice as hard
    assert np.allclose(a["mean_abs_torque"], [56.0, 112.0]) and np.allclose(b["mean_abs_torque"], [10.0, 20.0])
    assert np.allclose(a["mean_abs_joint_speed"], [0.56, 1.12]) and np.allclose(b["mean_abs_joint_speed"], [0.1, 0.2])
    assert (tmp_path / "usage.md").read_text().count("\n| ") == 3 * 3  # three tables: header + two rows each


def test_a_shipped_policy_is_played_in_the_ground_truth(tmp_path, monkeypatch, capsys):
    policy = str(REPO / "pretrained_models/RL_policies/Cartpole/seed0.pth")
    code, out, err = run_script(SCRIPT, "--rl-cfg", RL_CFG, "--checkpoints", policy, "--torque-limit", "1500",
                                "--num-envs", "4", "--steps", "20", "--output", str(tmp_path / "usage.json"),
                                monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    (row,) = json.loads((tmp_path / "usage.json").read_text())["rows"]
    # a swing-up pumps the cart hard (0.18 measured); the passive pole hinge, half the entries, never gets a torque
    assert 0.1 < row["mean_abs_over_limit"] <= 0.5 and 0.0 < row["share_above_0.5"] <= 0.5
    assert 0.0 < row["sign_change_rate"] <= 0.5  # the pole hinge never changes sign
    # the pole gets no torque but swings: its speed is the state's, not the torque's
    assert row["mean_abs_torque"][0] > 0.0 and row["mean_abs_torque"][1] == 0.0
    assert all(v > 0.0 for v in row["mean_abs_joint_speed"])


def test_without_a_limit_or_a_dataset_it_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    code, _, err = run_script(SCRIPT, "--rl-cfg", RL_CFG, "--output",
                              str(tmp_path / "usage.json"), monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == ["error: give --datasets or --torque-limit: the torques are reported "
                                              "relative to a limit"]
    assert not (tmp_path / "usage.json").exists()
