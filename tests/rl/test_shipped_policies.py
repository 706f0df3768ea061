"""Every shipped PPO policy loads, with its folder's config, through the restricted unpickler and acts."""

import json
from pathlib import Path

import pytest
import torch

from nerd.rl.config import load_rl_config, with_num_envs
from nerd.rl.runner import load_policy
from nerd.rl.vec_env import make_vec_env

REPO = Path(__file__).resolve().parents[2]
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
