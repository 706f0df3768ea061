"""Command-line entry points: a generate -> train -> evaluate smoke run, and one-line errors for bad input."""

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, error_lines, run_script


def test_generate_train_evaluate_from_another_directory(tmp_path):
    """The three scripts run from an unrelated working directory and produce their files."""
    def run(*args):
        result = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    for split, seed in (("train", 0), ("valid", 1)):
        run(str(REPO / "generate/generate_dataset.py"), "--env-name", "Cartpole", "--num-transitions", "2000",
            "--trajectory-length", "50", "--num-envs", "20", "--seed", str(seed), "--dataset-dir", "data",
            "--dataset-name", split)
    out = run(str(REPO / "train/train.py"), "--cfg", str(REPO / "cfg/train/Cartpole/cpu.yaml"), "--logdir", "run",
              "--train-dataset", "data/train.hdf5", "--valid-dataset", "data/valid.hdf5", "--cfg-overrides",
              "num_epochs=1", "batches_per_epoch=5", "batch_size=32", "valid_batches=2", "rollout_eval.num_envs=2",
              "rollout_eval.horizon=5", "model.transformer.n_layer=1", "model.transformer.n_embd=16")
    assert "best validation loss" in out
    # The end line says what the best checkpoint's score is: the rollout check's errors, with their units.
    assert ("best checkpoint by rollout: " in out and "cart_position_error [m] + pole_angle_error [rad], each a mean "
            "over the 5 steps of 2 rollouts" in out), out
    out = run(str(REPO / "eval/eval_passive_motion.py"), "--env-name", "Cartpole", "--model-path", "run/nn/best.pt",
              "--env-mode", "neural", "--num-envs", "4", "--num-rollouts", "4", "--rollout-horizon", "20",
              "--output", "eval/result.json")
    assert "cart_position_error" in out and " ± " in out and "env-steps/s: ground truth" in out
    results = json.loads((tmp_path / "eval/result.json").read_text())
    assert len(results["error_vs_step"]["pole_angle_error"]) == 20
    assert results["metric_units"] == {"cart_position_error": "m", "pole_angle_error": "rad"}
    assert set(results["metrics_std"]) == set(results["metrics"]) and results["env_steps_per_second"]["evaluated"] > 0
    assert "example_trajectories" not in results  # plotted, not stored
    assert "ensemble_disagreement" not in results  # one model
    assert (tmp_path / "eval/result.png").stat().st_size > 1000


@pytest.mark.parametrize("args,message", [
    (["--env-name", "Robot", "--num-transitions", "10"], "unknown env name 'Robot'"),
    (["--env-name", "Cartpole", "--num-transitions", "0"], "--num-transitions must be positive"),
])
def test_generate_rejects_bad_arguments(args, message, tmp_path, monkeypatch, capsys):
    """Unknown robots and empty requests exit 1 with one error line and write nothing."""
    code, _, err = run_script("generate/generate_dataset.py", *args, "--dataset-dir", str(tmp_path),
                              "--dataset-name", "x", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1
    assert len(error_lines(err)) == 1 and message in error_lines(err)[0]
    assert list(tmp_path.iterdir()) == []


def test_generate_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    """An existing output without --overwrite is an error and the file is left untouched."""
    (tmp_path / "x.hdf5").write_text("keep me")
    code, _, err = run_script("generate/generate_dataset.py", "--env-name", "Cartpole", "--num-transitions", "10",
                              "--dataset-dir", str(tmp_path), "--dataset-name", "x",
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "pass --overwrite" in error_lines(err)[0]
    assert (tmp_path / "x.hdf5").read_text() == "keep me"


def test_train_rejects_unknown_config_keys_and_missing_data(tmp_path, monkeypatch, capsys):
    """A typo in a config key names the dotted key; a missing dataset names the file."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("env_name: Cartpole\nmodel:\n  transformer:\n    n_layers: 3\n")
    code, _, err = run_script("train/train.py", "--cfg", str(cfg), "--logdir", str(tmp_path / "run"),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "unknown config key 'model.transformer.n_layers'" in error_lines(err)[0]
    code, _, err = run_script("train/train.py", "--cfg", str(REPO / "cfg/train/Cartpole/cpu.yaml"), "--logdir",
                              str(tmp_path / "run"), "--train-dataset", str(tmp_path / "none.hdf5"),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "dataset not found" in error_lines(err)[0]


def test_eval_needs_a_model_for_neural_mode(monkeypatch, capsys):
    """Neural evaluation without --model-path is a one-line error."""
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--env-mode", "neural",
                              "--num-envs", "2", "--num-rollouts", "2", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "needs --model-path" in error_lines(err)[0]


def test_eval_with_several_models_evaluates_their_ensemble(tmp_path, monkeypatch, capsys):
    """Two --model-path checkpoints (one with our joint-limit inputs) are evaluated as one ensemble and recorded as a
    list; a checkpoint of another robot among them is a one-line error."""
    from nerd.checkpoint import save_checkpoint
    from nerd.envs import make_env
    from nerd.features import signature_of_env
    from nerd.models import ModelConfig
    from nerd.models.nerd_model import NeRDModel
    from nerd.models.transformer import TransformerConfig

    tiny = ModelConfig(type="transformer", transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16, block_size=16,
                                                                         head_hidden=[16]))
    paths = []
    for name, options in (("Cartpole", {}), ("Cartpole", {"joint_limit_inputs": True}), ("PendulumWithContact", {})):
        sig = signature_of_env(make_env(name, 1), **options)
        paths.append(str(save_checkpoint(tmp_path / f"{name}_{len(paths)}.pt",
                                         NeRDModel(sig.input_groups, sig.target_dim, tiny), sig, {}, history_length=4)))
    out = tmp_path / "ensemble.json"
    code, stdout, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--model-path", *paths[:2],
                                   "--num-envs", "2", "--num-rollouts", "2", "--rollout-horizon", "5", "--output",
                                   str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err[-2000:]
    results = json.loads(out.read_text())
    assert results["model_path"] == paths[:2]
    assert "neural vs ground truth (ensemble of 2 models)" in stdout and "pole_angle_error" in stdout
    disagreement = results["ensemble_disagreement"]  # two differently initialised models part from the first step
    assert disagreement["members"] == 2 and len(disagreement["vs_step"]) == 5 and min(disagreement["vs_step"]) > 0
    assert set(disagreement["rank_correlation_with_error"]) == set(results["metrics"])
    assert "ensemble disagreement" in stdout
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--model-path", paths[0],
                              paths[2], "--num-envs", "2", "--num-rollouts", "2", monkeypatch=monkeypatch,
                              capsys=capsys)
    assert code == 1 and "checkpoint is for robot PendulumWithContact, not Cartpole" in error_lines(err)[0]
    # --mirror (ours): one model beside its mirror image, recorded; a robot without a reflection refuses it.
    out = tmp_path / "mirror.json"
    code, stdout, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--model-path", paths[0],
                                   "--mirror", "--num-envs", "2", "--num-rollouts", "2", "--rollout-horizon", "3",
                                   "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err[-2000:]
    results = json.loads(out.read_text())
    assert results["mirror"] is True and results["ensemble_disagreement"]["members"] == 2
    assert "(each model also mirrored)" in stdout
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "PendulumWithContact", "--model-path",
                              paths[2], "--mirror", "--num-envs", "2", "--num-rollouts", "2", monkeypatch=monkeypatch,
                              capsys=capsys)
    assert code == 1 and "PendulumWithContact declares no reflection symmetry" in error_lines(err)[0]


def test_user_errors_are_one_line_and_internal_errors_keep_their_traceback(capsys):
    """run_main reports a UserError as one line with exit code 1, but lets a plain ValueError (a bug) propagate."""
    from nerd.cli import run_main
    from nerd.errors import UserError

    def bad_input():
        raise UserError("--num-envs must be positive, got 0")

    def bug():
        raise ValueError("shape mismatch inside the library")

    with pytest.raises(SystemExit) as exit_info:
        run_main(bad_input)
    assert exit_info.value.code == 1
    assert error_lines(capsys.readouterr().err) == ["error: --num-envs must be positive, got 0"]
    with pytest.raises(ValueError, match="shape mismatch"):
        run_main(bug)


def test_control_mode_reaches_the_environment(tmp_path, monkeypatch, capsys):
    """--control-mode selects a robot's controller (recorded in the results); a robot with one controller refuses it."""
    out = tmp_path / "franka.json"
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Franka", "--env-mode", "ground-truth",
                              "--control-mode", "position", "--num-envs", "2", "--num-rollouts", "2",
                              "--rollout-horizon", "3", "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err[-2000:]
    results = json.loads(out.read_text())
    assert results["control_mode"] == "position"
    assert results["metric_units"] == {"joint_position_error": "rad", "end_effector_position_error": "m"}
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--env-mode", "ground-truth",
                              "--control-mode", "position", "--num-envs", "2", "--num-rollouts", "2",
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "applies to Anymal, Franka only" in error_lines(err)[0]


def test_bench_rl_times_the_captured_frame_and_the_policy_beside_the_plain_step(tmp_path, monkeypatch, capsys):
    """The GPU check's throughput command, at a tiny size: with --capture-frame and --policy every row has the
    captured frame's column beside the plain neural step's, and the shipped policy that acted."""
    out = tmp_path / "rl.json"
    code, stdout, err = run_script("bench/bench_rl.py", "--quick", "--robots", "Cartpole", "--num-envs", "4",
                                   "--capture-frame", "--policy", "--seconds", "0.05", "--repeats", "1",
                                   "--matmul-size", "64", "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    results = json.loads(out.read_text())
    (row,) = results["rows"]
    assert row["neural_graph"]["best"] > 0 and row["neural"]["best"] > 0 and row["floor_share_graph"] > 0
    assert row["policy"] == "Cartpole/seed0.pth" and results["capture_frame"] is True
    assert "| neural, graph | graph / GT |" in stdout


def test_gpu_targets_reads_the_checks_results(tmp_path, monkeypatch, capsys):
    """The GPU check's target table: ratios to the ground truth, shares of the FLOP floor and PPO's steady-state
    rate from the files the check writes; what is missing is reported as not measured."""
    row = {"robot": "Ant", "num_envs": 512, "ground-truth": {"best": 100.0}, "neural": {"best": 300.0},
           "neural_graph": {"best": 600.0}, "floor_env_steps_per_s": 1000.0}
    (tmp_path / "rl_policy.json").write_text(json.dumps({"rows": [row]}))
    (tmp_path / "ppo_ant_graph").mkdir()
    (tmp_path / "ppo_ant_graph" / "train_summary.json").write_text(json.dumps({"epochs": [
        {"frames": 100, "seconds": 5.0}, {"frames": 300, "seconds": 6.0}, {"frames": 500, "seconds": 7.0}]}))
    code, out, err = run_script("bench/gpu_targets.py", str(tmp_path), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "| Ant run, neural / ground truth at N = 512 | 3.00x | 6.00x | 5.00x | 10.00x |" in out
    assert "| ANYmal forward_walk, neural env-steps/s at N = 8192 | not measured | not measured |" in out
    results = json.loads((tmp_path / "targets.json").read_text())
    assert results["ppo_env_steps_per_s"] == {"graph": 200.0, "plain": None, "gt": None}
