"""The NeRD release's published policies load safely and play in our ground truth.

The policies are not in the repository: ``NERD_RELEASE_POLICIES`` names a folder of them in the layout of
``eval/play_release_policies.py --release-dir`` (``<Robot>/<task>/<Robot>PPO.pth``). Where no such folder is
found these tests skip.

A policy only plays well where its task (observation, reward, reset) and physics match the release's, so a few
dozen steps of each are a sharp check of the Z-up restatement; the 2048-episode measurement is
``eval/play_release_policies.py`` (docs/rl.md).
"""

import json
import os
import pathlib

import pytest
import torch

from nerd.rl.config import load_rl_config
from nerd.rl.policy import load_policy, load_rl_games_checkpoint
from nerd.rl.vec_env import make_vec_env
from tests.helpers import REPO, error_lines, run_script

RELEASE_DIR = pathlib.Path(os.environ.get("NERD_RELEASE_POLICIES", REPO.parent / "shared" / "release_policies"))
pytestmark = pytest.mark.skipif(not RELEASE_DIR.is_dir(), reason=f"release policies not found at {RELEASE_DIR}")


def policy(task: str, robot: str = "Ant") -> pathlib.Path:
    return RELEASE_DIR / robot / task / f"{robot}PPO.pth"


def test_release_checkpoint_loads_with_weights_only():
    """A CUDA-saved checkpoint with numpy scalars loads onto the CPU; other globals are refused in one line."""
    state = load_rl_games_checkpoint(policy("run"), "cpu")
    assert state["model"]["running_mean_std.running_mean"].shape == (28,)
    assert all(t.device.type == "cpu" for t in state["model"].values())
    assert float(state["last_mean_rewards"]) > 2000


def test_other_pickled_globals_are_refused(tmp_path):
    """weights_only stays on: a checkpoint that needs any other global is a ValueError naming it."""
    path = tmp_path / "odd.pth"
    torch.save({"model": {}, "path": pathlib.PurePosixPath("/x")}, path)
    with pytest.raises(ValueError, match="Unsupported global: GLOBAL pathlib.PurePosixPath"):
        load_rl_games_checkpoint(path)


@pytest.mark.parametrize("task,check", [
    ("run", lambda dx, ret: dx.mean() > 1.0),  # runs ~1.6 m along +x in 1 s
    ("spin", lambda dx, ret: ret.mean() > 120),  # ~3-5 rad/s after landing
    ("spin_track", lambda dx, ret: ret.mean() > 70),  # near 5 rad/s; a policy at rest would score ~6
])
def test_published_policies_do_their_task_in_our_ground_truth(task, check):
    """60 steps of 4 envs from the release's reset: nobody falls, and the policy does what its task rewards."""
    cfg = load_rl_config(REPO / "cfg" / "rl" / "Ant" / f"{task}.yaml")
    cfg.env.env_mode, cfg.env.num_envs = "ground-truth", 4
    vec_env = make_vec_env(cfg.env, "cpu", seed=0)
    act = load_policy(cfg, policy(task), vec_env.get_env_info(), "cpu")
    obs = vec_env.reset()
    start = vec_env.nenv.get_states()
    ret = torch.zeros(4)
    with torch.no_grad():
        for _ in range(60):
            obs, rewards, dones, _ = vec_env.step(act(obs))
            ret += rewards
            assert not dones.any()
    dx = vec_env.nenv.get_states()[:, 0] - start[:, 0]
    assert check(dx, ret), (dx, ret)


def test_run_rl_plays_a_release_checkpoint(tmp_path, monkeypatch, capsys):
    """``eval/run_rl.py --playback`` plays the published run policy (one short episode)."""
    out = tmp_path / "play.json"
    code, stdout, err = run_script("eval/run_rl.py", "--rl-cfg", str(REPO / "cfg/rl/Ant/run.yaml"), "--env-mode",
                                   "ground-truth", "--playback", str(policy("run")), "--num-games", "1",
                                   "--output", str(out), "--cfg-overrides", "env.episode_length=40",
                                   monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, error_lines(err)
    result = json.loads(out.read_text())
    assert result["num_games"] == 1 and result["episode_lengths"] == [40] and result["mean_reward"] > 60


@pytest.mark.parametrize("task,direction", [("forward_walk", (1.0, 0.0)), ("side_walk", (0.0, -1.0))])
def test_published_anymal_policies_walk_in_the_release_variant(task, direction):
    """2 s of 4 envs of the release variant from the release's reset: nobody falls, the base walks ~1 m/s in the
    task's direction, and the per-step reward is near the paper's 1.32-1.36 (its 1000-step totals / 1000)."""
    cfg = load_rl_config(REPO / "cfg" / "rl" / "Anymal" / f"{task}.yaml")
    cfg.env.env_mode, cfg.env.num_envs, cfg.env.robot_variant = "ground-truth", 4, "release"
    vec_env = make_vec_env(cfg.env, "cpu", seed=0)
    act = load_policy(cfg, policy(task, "Anymal"), vec_env.get_env_info(), "cpu")
    obs = vec_env.reset()
    ret = torch.zeros(4)
    with torch.no_grad():
        for step in range(120):
            if step == 60:
                start = vec_env.nenv.get_states()[:, :2]
            obs, rewards, dones, _ = vec_env.step(act(obs))
            ret += rewards
            assert not dones.any()
    speed = (vec_env.nenv.get_states()[:, :2] - start) / 1.0 @ torch.tensor(direction)
    assert (speed > 0.7).all() and (speed < 1.3).all(), speed
    assert (ret / 120 > 1.15).all(), ret / 120


def test_play_release_policy_reports_anymal_against_the_paper():
    """The measurement's report (shortened episodes): robot, variant, friction, the paper's mean ± std, per-term
    rewards and observation z-scores, and a table row naming them."""
    from nerd.rl.release_policies import format_report, play_release_policy

    res = play_release_policy("side_walk", policy("side_walk", "Anymal"), num_games=2, num_envs=2, robot="Anymal",
                              robot_variant="release", contact_friction="huber", episode_length=20)
    assert (res["robot"], res["robot_variant"], res["contact_friction"]) == ("Anymal", "release", "huber")
    assert (res["paper_ground_truth"], res["paper_ground_truth_std"]) == (1360.2, 81.2)
    assert res["episode_lengths"] == [20, 20] and res["full_length_share"] == 1.0
    assert set(res["reward_terms"]) == {"velocity", "yaw", "torque", "floor"} and len(res["observation_mean_z"]) == 37
    row = format_report([res]).splitlines()[-1]
    assert row.startswith("| Anymal / side_walk | release | huber | 2 |") and "1360.2 ± 81.2" in row
