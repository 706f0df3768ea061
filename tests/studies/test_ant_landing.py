"""studies/ant_landing/ant_landing.py: the pose summary on known poses, and the Ant's fall in the ground truth
against free fall."""

import json
import math
import runpy

import torch

from nerd.frames import quat_from_axis_angle
from tests.helpers import REPO, run_script

SCRIPT = "studies/ant_landing/ant_landing.py"
MODEL = str(REPO / "pretrained_models/NeRD_models/Ant/model.pt")


def load_script():
    return runpy.run_path(str(REPO / SCRIPT))


def test_tilt_is_the_angle_between_the_torso_and_world_z_axes():
    pose_summary = load_script()["pose_summary"]
    states = torch.zeros(1, 3, 29)
    angles = torch.tensor([0.0, math.pi / 6, math.pi / 2])
    axes = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    states[0, :, 3:7] = quat_from_axis_angle(axes / axes.norm(dim=1, keepdim=True), angles)
    states[0, :, 7:15] = torch.arange(8.0)  # hinges in (hip, ankle) pairs per leg
    summary = pose_summary(states)
    assert torch.allclose(summary["tilt"][0], torch.tensor([0.0, 30.0, 90.0]), atol=1e-3)
    assert summary["hips"][0, 0].tolist() == [0.0, 2.0, 4.0, 6.0]
    assert summary["ankles"][0, 0].tolist() == [1.0, 3.0, 5.0, 7.0]


def test_the_ground_truth_falls_freely_until_it_lands(tmp_path, monkeypatch, capsys):
    code, out, err = run_script(SCRIPT, "--model-paths", MODEL, "--num-rollouts", "8", "--horizon", "12",
                                "--output", str(tmp_path / "landing.json"), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "landing.json").read_text())
    truth, model = result["curves"]["ground truth"], result["curves"][MODEL]
    # No foot touches the ground in the first 10 frames from a 1 m torso: the drop is g t^2 / 2 (the reset's
    # vertical velocities, |v| <= 0.1 m/s, average out to a few mm over 8 rollouts).
    t = 10 / 60.0
    assert abs((truth["height"][0] - truth["height"][10]) - 9.81 * t * t / 2) < 0.015
    assert truth["height"][0] == model["height"][0]  # both start from the same states
    assert all(0.0 <= share <= 1.0 for share in model["hips_wrong_side"])
    assert model["hip_bias"][0] == 0.0 and "hip_bias" not in truth
    assert (tmp_path / "landing.md").exists() and (tmp_path / "landing.png").exists()
