"""studies/held_action/held_action.py: held single-joint actions in the ground truth and in a shipped model."""

import json

import pytest

from tests.helpers import REPO, error_lines, run_script

SCRIPT = "studies/held_action/held_action.py"
FRANKA_RL = str(REPO / "cfg/rl/Franka/reach_position_cpu.yaml")
FRANKA_MODEL = str(REPO / "pretrained_models/NeRD_models/Franka/task_start/model.pt")


def test_every_joint_follows_its_held_action_in_both_simulators(tmp_path, monkeypatch, capsys):
    steps = 4
    code, _, err = run_script(SCRIPT, "--rl-cfg", FRANKA_RL, "--nerd-model-path", FRANKA_MODEL, "--num-envs", "4",
                              "--steps", str(steps), "--output", str(tmp_path / "held.json"),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "held.json").read_text())
    assert result["metric"] == "end-effector error [m]"
    assert [(r["joint"], r["action"]) for r in result["rows"]] == [(j, s) for j in range(7) for s in (1.0, -1.0)]
    for row in result["rows"]:
        (model,) = row["models"]
        # the PD's target leads the joint by 0.03125 rad per unit action: every joint moves the way it is pushed,
        # by 4 steps x 2 frames of motion (the measured 4-step displacements are 0.02-0.06 rad)
        assert 0.01 < row["gt_displacement"] * row["action"] < 0.2
        assert 0.01 < model["displacement"] * row["action"] < 0.2
        # the model follows the first steps closely (< 1 cm), and its error is reported for every step
        assert len(model["error_per_step"]) == steps and 0.0 < model["error_end"] < 0.01
        assert model["error_half"] == model["error_per_step"][steps // 2 - 1]
    assert (tmp_path / "held.md").read_text().count("\n| joint ") == 14


@pytest.mark.parametrize("args, message", [
    (["--steps", "1"], "error: --steps must be at least 2, got 1"),
    (["--steps", "200"], "error: --steps 200 is longer than the task's episode (128 steps)"),
])
def test_bad_steps_are_one_line_errors(tmp_path, monkeypatch, capsys, args, message):
    code, _, err = run_script(SCRIPT, "--rl-cfg", FRANKA_RL, "--nerd-model-path", FRANKA_MODEL, "--num-envs", "2",
                              *args, "--output", str(tmp_path / "held.json"), monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == [message]
    assert not (tmp_path / "held.json").exists()
