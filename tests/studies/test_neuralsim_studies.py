"""studies/pendulum_sysid, cartpole_trajopt, hybrid_friction and cube_sysid at tiny sizes: the report's files and
input errors."""

import json

from tests.helpers import error_lines, run_script

SYSID = "studies/pendulum_sysid/pendulum_sysid.py"
TRAJOPT = "studies/cartpole_trajopt/cartpole_trajopt.py"
CUBE = "studies/cube_sysid/cube_sysid.py"


def test_pendulum_sysid_writes_one_grid_per_method(tmp_path, monkeypatch, capsys):
    """A 2x2 grid of guesses, a 3-frame reference: every method reports every start, the truth is its own fit."""
    out = tmp_path / "sysid.json"
    code, _, err = run_script(SYSID, "--grid", "2", "--bounds", "1.2", "1.8", "--frames", "3", "--hops", "1",
                              "--iterations", "2", "--chains", "2", "--output", str(out),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"local", "multistart", "basin_hopping"}
    for result in report["results"].values():
        assert len(result["final_error_m"]) == 4 and 0.0 <= result["success_rate"] <= 1.0
    # The grid's corner (1.2, 1.8) is the truth: a fit that starts there stays within the tolerance.
    assert report["results"]["local"]["final_error_m"][1] < 0.05
    assert report["results"]["basin_hopping"]["rollouts_per_start"] == 2 * (2 + 1)
    assert out.with_suffix(".md").is_file() and out.with_suffix(".png").is_file()


def test_studies_refuse_bad_input_in_one_line(tmp_path, monkeypatch, capsys):
    code, _, err = run_script(SYSID, "--true", "3", "1", "--output", str(tmp_path / "a.json"),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == ["error: --true [3.0, 1.0] lies outside --bounds 0.6 2.7"]
    code, _, err = run_script(TRAJOPT, "--nerd-model", str(tmp_path / "none.pt"), "--output", str(tmp_path / "b.json"),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == [f"error: --nerd-model {tmp_path / 'none.pt'}: no such file"]


def test_cartpole_trajopt_plays_each_plan_in_both_simulators(tmp_path, monkeypatch, capsys):
    out = tmp_path / "trajopt.json"
    code, _, err = run_script(TRAJOPT, "--num-starts", "2", "--horizon", "8", "--iterations", "2", "--output",
                              str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    plans = json.loads(out.read_text())["plans"]
    assert set(plans) == {"zero actions", "optimised in neural", "optimised in ground-truth"}
    for plan in plans.values():
        played = plan["played"]
        assert len(played["per_start"]["ground-truth"]) == 2 and "relative_gap" in played
    assert len(plans["optimised in neural"]["history"]) == 2
    code, _, err = run_script(TRAJOPT, "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and "--overwrite" in error_lines(err)[0]


def test_hybrid_friction_reports_every_model_at_every_size(tmp_path, monkeypatch, capsys):
    out = tmp_path / "hybrid.json"
    code, _, err = run_script("studies/hybrid_friction/hybrid_friction.py", "--sizes", "1", "2", "--train-frames", "12",
                              "--eval-frames", "14", "--eval-trajectories", "2", "--window", "3", "--batch", "2",
                              "--iterations", "2", "--lstm-iterations", "2", "--nerd-minutes", "0.002", "--output",
                              str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    results = json.loads(out.read_text())["results"]
    assert set(results["analytical"]) == {"all sizes"}
    for model in ("identified", "hybrid", "lstm", "nerd"):
        assert set(results[model]) == {"12 transitions", "24 transitions"}
    hybrid = results["hybrid"]["24 transitions"]
    assert len(hybrid["input_importance"]) == 2 and len(hybrid["input_importance"][0]) == 4
    assert len(results["identified"]["12 transitions"]["damping"]) == 2
    code, _, err = run_script("studies/hybrid_friction/hybrid_friction.py", "--window", "80", "--output",
                              str(tmp_path / "x.json"), monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == ["error: --window 80 is longer than a training trajectory "
                                              "(--train-frames 60)"]


def test_cube_sysid_identifies_augments_and_evaluates_held_out(tmp_path, monkeypatch, capsys):
    """Two 'real' tosses of 8 frames, windows of 3: both fits run, each is evaluated on held-out tosses beside the
    mismatched simulator; a dataset of the sim variant is refused in one line."""
    from nerd.generation import GenerationConfig, generate_dataset

    data = {}
    for variant in ("real", "sim"):
        data[variant] = str(generate_dataset(GenerationConfig("CubeToss", 16, trajectory_length=8, num_envs=2,
                                                              passive=True, robot_variant=variant),
                                             tmp_path / f"{variant}.hdf5", progress=False).path)
    out = tmp_path / "cube.json"
    args = ("--num-trajectories", "2", "--frames", "6", "--window", "3", "--iterations", "2", "--eval-rollouts", "2",
            "--finetune-report", "")
    code, _, err = run_script(CUBE, "--real-train", data["real"], *args, "--output", str(out),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    report = json.loads(out.read_text())
    assert [(f["method"], f["num_trajectories"], f["windows"]) for f in report["fits"]] == [("identify", 2, 4),
                                                                                        ("augment", 2, 4)]
    identified = report["fits"][0]
    assert set(identified["material"]) == {"ke", "kd", "mu"} and len(identified["loss_history"]) == 3
    for fit in report["fits"]:
        assert set(fit["held_out"]["metrics_by_horizon"]) == {"74", "100"}
    assert report["mismatched_simulator"]["num_rollouts"] == 2
    assert out.with_suffix(".md").is_file() and out.with_suffix(".png").is_file()
    code, _, err = run_script(CUBE, "--real-train", data["sim"], *args, "--output", str(tmp_path / "x.json"),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == [f"error: {data['sim']} holds no 'real' CubeToss tosses (env CubeToss, "
                                              "variant sim)"]
