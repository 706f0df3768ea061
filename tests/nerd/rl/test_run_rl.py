"""RL entry points: tiny PPO training -> checkpoint -> playback, batch evaluation table, one-line errors."""

import json
import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from nerd.checkpoint import save_checkpoint
from nerd.config import ConfigError, from_dict, load_config
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.features import signature_of_env
from nerd.models.nerd_model import NeRDModel
from nerd.rl.batch_eval import PolicyEvalConfig, batch_evaluate, format_markdown
from nerd.rl.config import RL_GAMES_CONFIG_KEYS, load_rl_config, resolve_params, with_num_envs
from nerd.rl.playback import evaluate_policy, format_playback
from nerd.rl.tasks import task_class
from nerd.rl.vec_env import make_vec_env
from tests.helpers import REPO, TINY, error_lines, run_script

CARTPOLE_CFG = str(REPO / "cfg/rl/Cartpole/swingup_cpu.yaml")
# A tiny PPO update: 8 envs x 32 steps per epoch, the config's 8 minibatches of 32, 2 mini-epochs.
TINY_PPO = ["--num-envs", "8", "--cfg-overrides", "params.config.mini_epochs=2"]


@pytest.fixture(scope="module")
def tiny_nerd_model(tmp_path_factory) -> str:
    """An untrained tiny Cartpole NeRD checkpoint (enough to run the neural simulator)."""
    sig = signature_of_env(make_env("Cartpole", 1))
    path = tmp_path_factory.mktemp("nerd") / "tiny.pt"
    save_checkpoint(path, NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {"history_length": 10},
                    history_length=10)
    return str(path)


@pytest.fixture(scope="module")
def trained_policy(tmp_path_factory, tiny_nerd_model) -> Path:
    """Run directory of a 3-epoch PPO run in the neural simulator, given as a path relative to the working
    directory (as a user types it)."""
    root = tmp_path_factory.mktemp("rl")
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    # 20-step episodes, so that episodes finish within the 3 x 32 steps of the run.
    mp.setattr(sys, "argv", ["eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--env-mode", "neural", "--nerd-model-path",
                             tiny_nerd_model, "--max-epochs", "3", "--logdir", "run", *TINY_PPO,
                             "env.episode_length=20"])
    try:
        runpy.run_path(str(REPO / "eval/run_rl.py"), run_name="__main__")
    finally:
        mp.undo()
    return root / "run"


def test_training_writes_checkpoints_config_and_summaries(trained_policy):
    """A tiny neural-mode PPO run writes the final checkpoint, the resolved config and TensorBoard events."""
    assert (trained_policy / "nn" / "last.pth").stat().st_size > 1000
    resolved = yaml.safe_load((trained_policy / "config.yaml").read_text())
    assert resolved["env"]["env_mode"] == "neural" and resolved["params"]["config"]["device"] == "cpu"
    assert resolved["env"]["episode_length"] == 20
    assert resolved["params"]["config"]["minibatch_size"] == 32 and resolved["params"]["config"]["max_epochs"] == 3
    assert list((trained_policy / "summaries").glob("events.out.tfevents.*"))
    summary = json.loads((trained_policy / "train_summary.json").read_text())
    assert summary["epochs"] and summary["epochs"][-1]["epoch"] == 3
    # Each epoch's frame count includes its own steps (rl-games reports the count before the epoch: 0 at first).
    batch = resolved["params"]["config"]["horizon_length"] * resolved["env"]["num_envs"]
    assert [e["frames"] for e in summary["epochs"]] == [e["epoch"] * batch for e in summary["epochs"]]
    # The run's files record its paths as given, not this machine's absolute ones (shipped copies stay portable).
    assert summary["logdir"] == "run" and summary["last_checkpoint"] == str(Path("run/nn/last.pth"))
    assert resolved["params"]["config"]["train_dir"] == "."


def test_playback_reports_reward_mean_and_std(trained_policy, tmp_path, monkeypatch, capsys):
    """Playback of the checkpoint in the ground truth runs exactly --num-games episodes and reports mean ± std."""
    out = tmp_path / "play.json"
    code, stdout, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--env-mode", "ground-truth",
                                   "--playback", str(trained_policy / "nn" / "last.pth"), "--num-games", "6",
                                   "--num-envs", "4", "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    result = json.loads(out.read_text())
    assert result["num_games"] == 6 and len(result["episode_rewards"]) == 6
    rewards = result["episode_rewards"]
    mean = sum(rewards) / 6
    assert result["mean_reward"] == pytest.approx(mean)
    assert result["std_reward"] == pytest.approx((sum((r - mean) ** 2 for r in rewards) / 6) ** 0.5)
    assert all(1 <= n <= 300 for n in result["episode_lengths"])
    assert f"reward {result['mean_reward']:.2f} ± {result['std_reward']:.2f}" in stdout


def test_playback_in_an_ensemble_of_nerd_models(trained_policy, tiny_nerd_model, tmp_path, monkeypatch, capsys):
    """--nerd-model-path with two checkpoints plays the policy in their ensemble; the first checkpoint alone plays
    the same episodes differently (the second model counts), and a missing second checkpoint is named."""
    from nerd.integrator import NeRDEnsembleIntegrator

    sig = signature_of_env(make_env("Cartpole", 1))
    torch.manual_seed(7)
    other = save_checkpoint(tmp_path / "other.pt", NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {},
                            history_length=10)
    cfg = load_rl_config(CARTPOLE_CFG)
    cfg.env.env_mode, cfg.env.num_envs, cfg.env.nerd_model_path = "neural", 2, [tiny_nerd_model, str(other)]
    assert isinstance(make_vec_env(cfg.env).nenv.integrator, NeRDEnsembleIntegrator)
    cfg.env.nerd_model_path, cfg.env.nerd_mirror = tiny_nerd_model, True  # one model beside its mirror image (ours)
    assert len(make_vec_env(cfg.env).nenv.integrator.members) == 2
    rewards = {}
    for name, paths in (("ensemble", [tiny_nerd_model, str(other)]), ("first", [tiny_nerd_model])):
        out = tmp_path / f"{name}.json"
        code, _, err = run_script("eval/run_rl.py", "--env-mode", "neural", "--nerd-model-path", *paths,
                                  "--playback", str(trained_policy / "nn" / "last.pth"), "--num-games", "4",
                                  "--num-envs", "4", "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
        assert code == 0, err[-2000:]
        rewards[name] = json.loads(out.read_text())["episode_rewards"]
    assert rewards["ensemble"] != rewards["first"]
    # --nerd-mirror (ours): the first model beside its mirror image, recorded in the playback's config
    out = tmp_path / "mirror.json"
    code, _, err = run_script("eval/run_rl.py", "--env-mode", "neural", "--nerd-model-path", tiny_nerd_model,
                              "--nerd-mirror", "--playback", str(trained_policy / "nn" / "last.pth"), "--num-games",
                              "4", "--num-envs", "4", "--output", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err[-2000:]
    played = json.loads(out.read_text())
    assert played["nerd_mirror"] is True and played["nerd_model_path"] == tiny_nerd_model
    assert played["episode_rewards"] != rewards["first"]
    code, _, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--env-mode", "neural", "--nerd-model-path",
                              tiny_nerd_model, str(tmp_path / "missing.pt"), "--max-epochs", "1", "--logdir",
                              str(tmp_path / "run"), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and f"NeRD model not found: {tmp_path / 'missing.pt'}" in error_lines(err)[0]


def test_batch_evaluation_writes_the_table(trained_policy, tiny_nerd_model, tmp_path, monkeypatch, capsys):
    """Two policies x {ground truth, neural} give per-policy and pooled rows with the relative gap and the reward at
    each step of an episode (JSON + Markdown + PNG)."""
    ckpt = str(trained_policy / "nn" / "last.pth")
    eval_cfg = tmp_path / "eval.yaml"
    eval_cfg.write_text(yaml.safe_dump({"rl_cfg": CARTPOLE_CFG, "checkpoints": [ckpt, ckpt],
                                        "nerd_model_path": tiny_nerd_model, "num_games": 3, "num_envs": 3}))
    out = tmp_path / "table.json"
    code, stdout, err = run_script("eval/batch_eval_policy.py", "--eval-cfg", str(eval_cfg), "--output", str(out),
                                   monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    table = json.loads(out.read_text())
    assert [row["policy"] for row in table["rows"]] == [ckpt, ckpt, "all"]
    for row in table["rows"]:
        gt, neural = row["ground-truth"]["mean"], row["neural"]["mean"]
        assert row["relative_gap"] == pytest.approx((neural - gt) / abs(gt))
    # The same policy from the same initial states scores the same twice.
    assert table["rows"][0]["ground-truth"] == table["rows"][1]["ground-truth"]
    assert table["rows"][2]["ground-truth"]["num_games"] == 6
    for row in table["rows"]:
        for simulator in ("ground-truth", "neural"):
            cell = row[simulator]
            # Every step's mean over the episodes running then adds up to the mean episode reward.
            steps = np.asarray(cell["reward_per_step"]) * np.asarray(cell["episodes_per_step"])
            assert steps.sum() / cell["num_games"] == pytest.approx(cell["mean"], rel=1e-9, abs=1e-9)
            assert cell["episodes_per_step"][0] == cell["num_games"]
            assert len(cell["reward_per_step"]) >= cell["mean_length"] and min(cell["episodes_per_step"]) > 0
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    markdown = out.with_suffix(".md").read_text()
    assert "| **all** |" in markdown and "gap (neural − GT) / abs(GT)" in markdown and "| **all** |" in stdout


def test_batch_evaluation_pools_policies_that_each_play_in_their_own_model(trained_policy, tiny_nerd_model, tmp_path,
                                                                         monkeypatch, capsys):
    """policy_nerd_models: each checkpoint plays in NeRD in its own model (a transfer loop's seeds) and the seeds
    pool into one row; the ground truth is the same for both, a model given twice scores what nerd_model_path does,
    and a list of the wrong length or beside nerd_model_path is a one-line error."""
    ckpt = str(trained_policy / "nn" / "last.pth")
    sig = signature_of_env(make_env("Cartpole", 1))
    torch.manual_seed(7)
    other = str(tmp_path / "other.pt")
    save_checkpoint(other, NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {"history_length": 10},
                    history_length=10)
    base = {"rl_cfg": CARTPOLE_CFG, "checkpoints": [ckpt, ckpt], "num_games": 3, "num_envs": 3,
            "episode_length": 20}

    def table(**changes):
        cfg = from_dict(PolicyEvalConfig, {**base, **changes})
        return batch_evaluate(cfg, progress=False)

    mixed = table(policy_nerd_models=[tiny_nerd_model, other])
    first, second, pooled = mixed["rows"]
    assert first["nerd_model"] == tiny_nerd_model and second["nerd_model"] == other and "nerd_model" not in pooled
    assert first["ground-truth"] == second["ground-truth"]
    assert first["neural"]["mean"] != second["neural"]["mean"]
    assert pooled["neural"]["mean"] == pytest.approx((first["neural"]["mean"] + second["neural"]["mean"]) / 2)
    one = table(nerd_model_path=tiny_nerd_model)["rows"][0]
    assert first["neural"] == one["neural"]
    assert "| NeRD model |" in format_markdown(mixed)
    for changes, message in [({"policy_nerd_models": [other]}, "lists 1 models for 2 checkpoints"),
                             ({"policy_nerd_models": [other, other], "nerd_model_path": other}, "keep one"),
                             ({"policy_nerd_models": [other, "missing.pt"]}, "NeRD model not found: missing.pt")]:
        with pytest.raises((UserError, FileNotFoundError), match=message):
            table(**changes)


@pytest.mark.parametrize("args,message", [
    (["--cfg-overrides", "env.task=fly", "--env-mode", "ground-truth"], "unknown task 'fly' for robot 'Cartpole'"),
    (["--env-mode", "neural"], "neural mode needs a NeRD model"),
    (["--env-mode", "neural", "--nerd-model-path", "missing.pt"], "NeRD model not found: missing.pt"),
    (["--env-mode", "ground-truth", "--playback", "missing.pth"], "policy checkpoint not found: missing.pth"),
    (["--cfg-overrides", "params.algo.name=sac"], "use 'a2c_continuous'"),
    (["--env-mode", "ground-truth", "--num-envs", "0"], "--num-envs must be positive"),
    (["--env-mode", "ground-truth", "--cfg-overrides", "params.config.minibatch_size=3000"], "does not divide"),
])
def test_bad_inputs_are_one_line_errors(args, message, tmp_path, monkeypatch, capsys):
    """Unknown tasks, missing models or checkpoints, bad sizes: exit 1 with one error line, nothing written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--max-epochs", "1", "--logdir", "run",
                              *args, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1
    assert len(error_lines(err)) == 1 and message in error_lines(err)[0], err[-500:]
    assert not (tmp_path / "run").exists()


def test_resume_continues_an_interrupted_run_and_extends_a_finished_one(trained_policy, tmp_path, monkeypatch,
                                                                       capsys):
    """--resume takes the run's own config and newest state: killed after its epoch-4 state, the run goes on
    from epoch 4 (not 0) to the new --max-epochs; flags that would change the run are refused."""
    import shutil

    from nerd.rl import train as rl_train
    from nerd.rl.policy import load_rl_games_checkpoint

    run = tmp_path / "run"
    shutil.copytree(trained_policy, run)
    monkeypatch.chdir(trained_policy.parent)  # the run's config names its NeRD model relative to here
    code, _, err = run_script("eval/run_rl.py", "--logdir", str(run), "--resume", monkeypatch=monkeypatch,
                              capsys=capsys)
    assert code == 1 and "no saved state before epoch 3" in error_lines(err)[0]
    # Extended from its finished epoch 3 and killed after epoch 5, with a state every 2 epochs (the last at 4).
    monkeypatch.setattr(rl_train, "RESUME_EVERY_EPOCHS", 2)
    plain = rl_train.ProgressObserver.after_print_stats

    def killed_after_5(self, frame, epoch_num, total_time):
        plain(self, frame, epoch_num, total_time)
        if epoch_num == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(rl_train.ProgressObserver, "after_print_stats", killed_after_5)
    code, out, _ = run_script("eval/run_rl.py", "--logdir", str(run), "--resume", "--max-epochs", "7",
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and "continuing from epoch 3 up to epoch 7" in out
    assert load_rl_games_checkpoint(run / "nn" / rl_train.RESUME_CHECKPOINT)["epoch"] == 4
    monkeypatch.setattr(rl_train.ProgressObserver, "after_print_stats", plain)
    code, out, _ = run_script("eval/run_rl.py", "--logdir", str(run), "--resume", "--max-epochs", "7",
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0 and "continuing from epoch 4 up to epoch 7" in out
    # The history, checkpoints and TensorBoard events of all three parts are kept.
    epochs = [e["epoch"] for e in json.loads((run / "train_summary.json").read_text())["epochs"]]
    assert epochs == sorted(set(epochs)) and {3, 4, 5, 6, 7} <= set(epochs)
    assert len(list((run / "summaries").glob("events.out.tfevents.*"))) == 3
    assert load_rl_games_checkpoint(run / "nn/last.pth")["epoch"] == 7
    assert not (run / "nn" / rl_train.RESUME_CHECKPOINT).exists() and not (run / rl_train.KEPT_STATE).exists()
    for args, message in ((["--resume"], "--resume continues the run in --logdir: name it"),
                          (["--resume", "--logdir", str(run), "--rl-cfg", CARTPOLE_CFG, "--overwrite"],
                           "drop --rl-cfg, --overwrite"),
                          (["--resume", "--logdir", str(tmp_path / "none")], "holds no training run")):
        code, _, err = run_script("eval/run_rl.py", *args, monkeypatch=monkeypatch, capsys=capsys)
        assert code == 1 and message in error_lines(err)[0], err[-300:]


def test_existing_run_directory_needs_overwrite(trained_policy, monkeypatch, capsys):
    """Training into a run directory that holds a run is refused without --overwrite."""
    code, _, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--env-mode", "ground-truth",
                              "--logdir", str(trained_policy), *TINY_PPO, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "pass --overwrite" in error_lines(err)[0]
    assert (trained_policy / "nn" / "last.pth").exists()


@pytest.mark.parametrize("path", sorted((REPO / "cfg/rl").glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_rl_configs_are_valid(path):
    """Every shipped RL config validates, names a registered task of its robot and splits into whole minibatches."""
    cfg = load_rl_config(path)
    assert task_class(cfg.env.robot, cfg.env.task).robot == path.parent.name
    params = resolve_params(cfg, "cpu", seed=0)
    assert params["config"]["num_actors"] * params["config"]["horizon_length"] % params["config"]["minibatch_size"] == 0


def test_shipped_eval_config_is_valid():
    """The shipped batch-evaluation config validates and points at a shipped RL config."""
    for path in (REPO / "cfg/eval").glob("*.yaml"):
        cfg = load_config(path, PolicyEvalConfig)
        assert (REPO / cfg.rl_cfg).is_file() and cfg.simulators == ["ground-truth", "neural"]


def test_playback_viewer_shows_ground_truth_and_nerd(trained_policy, tiny_nerd_model, monkeypatch, capsys):
    """--playback with --viewer runs one episode in both simulators side by side and reports each one's reward."""
    code, out, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--nerd-model-path", tiny_nerd_model,
                                "--playback", str(trained_policy / "nn" / "last.pth"), "--viewer", "null",
                                "--cfg-overrides", "env.episode_length=12", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "episode reward: ground truth" in out and ", NeRD" in out and "13 frames in" in out


def test_playback_finds_the_run_config_beside_the_checkpoint(trained_policy, monkeypatch, capsys):
    """--playback without --rl-cfg reads the run's config.yaml; rl-games' own prints stay off stdout."""
    code, out, err = run_script("eval/run_rl.py", "--env-mode", "ground-truth", "--playback",
                                str(trained_policy / "nn" / "last.pth"), "--num-games", "2", "--num-envs", "2",
                                monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert out.splitlines() == [line for line in out.splitlines() if line.startswith("Cartpole swingup")], out
    assert "2 episodes: reward" in out
    code, _, err = run_script("eval/run_rl.py", "--playback", str(REPO / "README.md"), monkeypatch=monkeypatch,
                              capsys=capsys)
    assert code == 1 and "no config.yaml beside" in error_lines(err)[0]


@pytest.fixture(scope="module")
def nan_nerd_model(tmp_path_factory) -> str:
    """A tiny Cartpole NeRD checkpoint whose output layer is NaN: every neural step diverges."""
    sig = signature_of_env(make_env("Cartpole", 1))
    model = NeRDModel(sig.input_groups, sig.target_dim, TINY)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    path = tmp_path_factory.mktemp("nan") / "nan.pt"
    save_checkpoint(path, model, sig, {"history_length": 10}, history_length=10)
    return str(path)


def test_all_diverged_playback_and_training_fail_and_partial_divergence_is_counted(
        trained_policy, nan_nerd_model, tmp_path, monkeypatch, capsys):
    """A NaN NeRD model: playback and training exit 1 saying every episode diverged (not "reward 0.00 ± 0.00");
    an evaluation where some episodes diverge reports how many."""
    code, out, err = run_script("eval/run_rl.py", "--env-mode", "neural", "--nerd-model-path", nan_nerd_model,
                                "--playback", str(trained_policy / "nn" / "last.pth"), "--num-games", "3",
                                monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "all 3 episodes diverged" in error_lines(err)[0] and "reward" not in out
    code, out, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--env-mode", "neural",
                                "--nerd-model-path", nan_nerd_model, "--max-epochs", "1", "--logdir",
                                str(tmp_path / "run"), *TINY_PPO, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "training episodes diverged" in error_lines(err)[0], err[-1000:]
    # Our one line per epoch (which counts the divergences), none of rl-games' own prints.
    assert out and all(line.startswith("epoch ") and "diverged" in line for line in out.splitlines()), out

    class HalfDiverging:
        """Two envs; env 0's episode diverges at its first step, env 1's times out after 2 steps."""

        num_envs, device = 2, "cpu"

        def seed(self, seed):
            self.t = 0

        def reset(self):
            self.t = 0
            return torch.zeros(2, 1)

        def step(self, actions):
            self.t += 1
            diverged = torch.tensor([self.t == 1, False])
            dones = torch.tensor([self.t == 1, self.t == 2], dtype=torch.uint8)
            return torch.zeros(2, 1), torch.ones(2), dones, {"diverged": diverged, "reward_terms": {}}

    result = evaluate_policy(HalfDiverging(), lambda obs: obs, num_games=4, seed=0)
    assert result["num_diverged"] == 2 and result["episode_lengths"] == [1, 2, 1, 2]
    text = format_playback({"robot": "Cartpole", "task": "swingup", "env_mode": "neural", **result})
    assert text.endswith("2 of 4 episodes diverged")


def test_rl_training_overwrite_keeps_the_old_run_when_inputs_are_bad(trained_policy, monkeypatch, capsys):
    """--overwrite with a missing NeRD model fails before the old run is touched."""
    before = {p: p.stat().st_mtime_ns for p in trained_policy.rglob("*") if p.is_file()}
    code, _, err = run_script("eval/run_rl.py", "--rl-cfg", CARTPOLE_CFG, "--env-mode", "neural",
                              "--nerd-model-path", "missing.pt", "--logdir", str(trained_policy), "--overwrite",
                              *TINY_PPO, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "NeRD model not found" in error_lines(err)[0]
    assert {p: p.stat().st_mtime_ns for p in trained_policy.rglob("*") if p.is_file()} == before


def test_unknown_rl_games_config_keys_are_refused():
    """A misspelt params.config key is an error with a suggestion; unknown top-level params keys too."""
    with pytest.raises(ConfigError, match=r"'params.config.learnign_rate'.*did you mean 'learning_rate'"):
        load_rl_config(CARTPOLE_CFG, ["params.config.learnign_rate=1e-3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'params.netwrok'"):
        load_rl_config(CARTPOLE_CFG, ["params.netwrok={}"])


def test_known_rl_games_config_keys_cover_what_the_installed_rl_games_reads():
    """Every key rl-games' source reads from a config mapping is in RL_GAMES_CONFIG_KEYS (upgrade guard)."""
    import re

    import rl_games

    pattern = re.compile(r"config(?:\[|\.get\()['\"]([A-Za-z_0-9]+)['\"]")
    read = {key for path in Path(rl_games.__file__).parent.rglob("*.py") for key in pattern.findall(path.read_text())}
    assert read and read <= RL_GAMES_CONFIG_KEYS, sorted(read - RL_GAMES_CONFIG_KEYS)


def test_rl_games_multi_gpu_switch_puts_each_rank_on_its_gpu_with_its_own_env_seed(monkeypatch):
    """params.config.multi_gpu passes through to rl-games; under torchrun rank r's envs go to cuda:<LOCAL_RANK>
    with seed + r (without a GPU this checks the resolved config only), and a CPU device is refused."""
    cfg = load_rl_config(CARTPOLE_CFG)
    cfg.params["config"]["multi_gpu"] = True
    with pytest.raises(ValueError, match="multi_gpu.*needs --device cuda"):
        resolve_params(cfg, "cpu", seed=3)
    for name, value in (("RANK", "3"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "4")):
        monkeypatch.setenv(name, value)
    config = resolve_params(cfg, "cuda", seed=3)["config"]
    assert config["multi_gpu"] is True and config["device"] == "cuda:1"
    assert config["env_config"]["device"] == "cuda:1" and config["env_config"]["seed"] == 6


def test_a_recurrent_policy_keeps_its_state_between_steps_and_resets_it_for_new_episodes(tmp_path):
    """The Franka configs' LSTM policy: rl-games' player alone would hand the network no state (a fresh zero
    state every step); the policy carries one hidden state per env and zeroes it when episodes start."""
    from rl_games.torch_runner import Runner

    from nerd.rl.policy import load_policy

    cfg = with_num_envs(load_rl_config(REPO / "cfg/rl/Franka/reach_torque_cpu.yaml", ["env.env_mode=ground-truth"]),
                        4)
    vec_env = make_vec_env(cfg.env)
    env_info = vec_env.get_env_info()
    params = resolve_params(cfg, "cpu", seed=0)
    params["config"]["env_info"] = env_info
    runner = Runner()
    runner.load({"params": params})
    torch.save({"model": runner.create_player().model.state_dict()}, tmp_path / "lstm.pth")

    act = load_policy(cfg, tmp_path / "lstm.pth", env_info)
    assert act.recurrent
    obs = torch.randn(4, env_info["observation_space"].shape[0], generator=torch.Generator().manual_seed(0))
    first = act(obs)
    assert not torch.allclose(act(obs), first)  # the same observation after one step: another state
    act.reset()
    torch.testing.assert_close(act(obs), first, rtol=0, atol=0)
    torch.testing.assert_close(act(obs[:2]), first[:2], rtol=0, atol=1e-6)  # a new batch size starts from zero
    result = evaluate_policy(vec_env, act, num_games=4, seed=0)
    assert result["num_games"] == 4 and result["mean_length"] == 128


def test_playback_progress_counts_finished_episodes(capsys):
    """evaluate_policy's bar counts episodes as they finish, up to num_games (3 batches of 2 envs for 5 games)."""

    class Timeouts:
        """Two envs whose episodes end after 1 and 3 steps."""

        num_envs, device = 2, "cpu"

        def reset(self):
            self.t = 0
            return torch.zeros(2, 1)

        def step(self, actions):
            self.t += 1
            dones = torch.tensor([self.t == 1, self.t == 3], dtype=torch.uint8)
            return torch.zeros(2, 1), torch.ones(2), dones, {"diverged": torch.zeros(2, dtype=torch.bool),
                                                             "reward_terms": {}}

    result = evaluate_policy(Timeouts(), lambda obs: obs, num_games=5, progress=True, desc="swingup")
    assert result["episode_lengths"] == [1, 3, 1, 3, 1]
    err = capsys.readouterr().err.replace("\r", "\n")
    counts = [int(n) for n in re.findall(r"swingup: .*?(\d+)/5 \[", err)]
    assert counts[-1] == 5 and max(counts) == 5 and "episode" in err
