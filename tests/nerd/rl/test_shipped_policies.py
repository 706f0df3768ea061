"""Every shipped PPO policy loads, with its folder's config, through the restricted unpickler and acts."""

import json
import subprocess
import sys

import pytest
import torch

from nerd.rl.config import load_rl_config, resolve_model_path, with_num_envs
from nerd.rl.policy import load_policy
from nerd.rl.vec_env import check_env_config, make_vec_env
from tests.helpers import REPO

POLICIES = sorted((REPO / "pretrained_models/RL_policies").glob("*/*.pth"))


def test_there_are_shipped_policies():
    assert {p.parent.name for p in POLICIES} >= {"Cartpole", "Ant", "Franka"}


@pytest.mark.parametrize("checkpoint", POLICIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_policy_loads_with_its_config_and_acts(checkpoint):
    """A policy whose network no longer matches its config.yaml (or a file that needs unrestricted unpickling)
    fails here; the actions on a reset observation are finite and of the task's width, and the folder's batch
    evaluation covers the policy."""
    folder = checkpoint.parent
    cfg = with_num_envs(load_rl_config(folder / "config.yaml", ["env.env_mode=ground-truth"]), 2)
    vec_env = make_vec_env(cfg.env)
    act = load_policy(cfg, checkpoint, vec_env.get_env_info())
    actions = act(vec_env.reset())
    assert actions.shape == (2, vec_env.get_env_info()["action_space"].shape[0])
    assert torch.isfinite(actions).all()
    assert (folder / "README.md").is_file()
    evaluated = [row["policy"] for row in json.loads((folder / "batch_eval.json").read_text())["rows"]]
    assert str(checkpoint.relative_to(REPO)) in evaluated, evaluated


LOOP_POLICIES = sorted((REPO / "pretrained_models/RL_policies").glob("*/*/*.pth"))
"""Policies a transfer loop trained (e.g. Anymal/forward_refined/): each with its loop's record and evaluation."""


@pytest.mark.parametrize("checkpoint", LOOP_POLICIES, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_transfer_loop_policy_loads_with_its_config_and_acts(checkpoint):
    """The policy plays in the ground truth with its own config (whose NeRD model is the shipped refined one),
    and its folder documents it: README, the loop's record and its 2048-episode evaluation."""
    folder = checkpoint.parent
    cfg = with_num_envs(load_rl_config(folder / "config.yaml", ["env.env_mode=ground-truth"]), 2)
    assert (REPO / cfg.env.nerd_model_path).is_file(), cfg.env.nerd_model_path
    vec_env = make_vec_env(cfg.env)
    actions = load_policy(cfg, checkpoint, vec_env.get_env_info())(vec_env.reset())
    assert actions.shape == (2, vec_env.get_env_info()["action_space"].shape[0]) and torch.isfinite(actions).all()
    for name in ("README.md", "loop.json", "eval.json", "eval.md"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "eval.json").read_text())["rows"][-1]["ground-truth"]["num_games"] == 2048


def test_relative_model_paths_resolve_from_cwd_then_repository_then_config_folder(tmp_path, monkeypatch):
    """A config's relative nerd_model_path: the working directory first, then the repository root, then the
    config's own folder; a path found nowhere stays as written and the error says how to name the model."""
    monkeypatch.chdir(tmp_path)
    shipped = "pretrained_models/NeRD_models/Cartpole/model.pt"
    config = tmp_path / "cfgs" / "run.yaml"
    config.parent.mkdir()
    (config.parent / "beside.pt").write_bytes(b"")
    assert resolve_model_path(shipped, config) == str(REPO / shipped)
    assert resolve_model_path("beside.pt", config) == str(config.parent / "beside.pt")
    (tmp_path / "beside.pt").write_bytes(b"")  # the working directory wins
    assert resolve_model_path("beside.pt", config) == "beside.pt"
    assert resolve_model_path("/abs/missing.pt", config) == "/abs/missing.pt"
    text = (REPO / "pretrained_models/RL_policies/Cartpole/config.yaml").read_text()
    config.write_text(text.replace(shipped, "nowhere/model.pt"))
    cfg = load_rl_config(config)
    assert cfg.env.nerd_model_path == "nowhere/model.pt"
    with pytest.raises(FileNotFoundError, match="NeRD model not found: nowhere/model.pt; pass --nerd-model-path"):
        check_env_config(cfg.env)


def test_shipped_policy_plays_in_nerd_from_another_directory(tmp_path):
    """Playing a shipped policy with its folder's config from an unrelated directory finds the NeRD model the
    config names relative to the repository."""
    policy = REPO / "pretrained_models/RL_policies/Cartpole/seed0.pth"
    result = subprocess.run([sys.executable, str(REPO / "eval/run_rl.py"), "--playback", str(policy), "--num-games",
                             "2", "--num-envs", "2", "--cfg-overrides", "env.episode_length=5"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "neural" in result.stdout and "2 episodes" in result.stdout, result.stdout
