"""The transfer loop's parts at tiny sizes: the policy's ground-truth data, the disagreement penalty, the loop."""

import copy
import json
import shutil
from dataclasses import asdict, replace

import h5py
import pytest
import torch
import yaml

from nerd.calibration import ensemble_calibration
from nerd.checkpoint import load_checkpoint, save_checkpoint
from nerd.config import ConfigError, from_dict
from nerd.datasets.hdf5 import DatasetError, read_attrs
from nerd.datasets.windows import TrajectoryWindows
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.features import RobotSignature, signature_of_env
from nerd.generation import GenerationConfig, generate_dataset
from nerd.models.nerd_model import NeRDModel
from nerd.modes import GROUND_TRUTH
from nerd.rl import train as rl_train
from nerd.rl import transfer
from nerd.rl.config import load_rl_config, with_num_envs
from nerd.rl.playback import play_policy
from nerd.rl.policy import load_rl_games_checkpoint
from nerd.rl.policy_data import collect_policy_data
from nerd.rl.train import KEPT_STATE, ProgressObserver, train_policy
from nerd.rl.transfer import run_transfer_loop
from nerd.rl.transfer_config import TransferConfig
from nerd.rl.vec_env import make_vec_env
from tests.helpers import REPO, TINY

CARTPOLE_CFG = str(REPO / "cfg/rl/Cartpole/swingup_cpu.yaml")
TINY_MODEL = {"type": "transformer",
              "transformer": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "head_hidden": [16]}}


def tiny_model(path, seed: int) -> str:
    """An untrained tiny Cartpole NeRD checkpoint; different seeds give different weights."""
    torch.manual_seed(seed)
    sig = signature_of_env(make_env("Cartpole", 1))
    save_checkpoint(path, NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {"history_length": 10},
                    history_length=10)
    return str(path)


def rl_config(models, num_envs: int = 8, **env):
    cfg = with_num_envs(load_rl_config(CARTPOLE_CFG, ["params.config.mini_epochs=1", "env.episode_length=20"]),
                        num_envs)
    cfg.env.nerd_model_path = models
    for key, value in env.items():
        setattr(cfg.env, key, value)
    return cfg


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two tiny models and a 1-epoch PPO policy trained in the first."""
    root = tmp_path_factory.mktemp("transfer")
    models = [tiny_model(root / "a.pt", 0), tiny_model(root / "b.pt", 1)]
    summary = train_policy(rl_config(models[0]), root / "ppo", max_epochs=1, progress=False)
    return root, models, summary["last_checkpoint"]


def test_policy_data_has_the_dataset_layout_and_is_the_ground_truth_motion(tiny, tmp_path):
    """The policy's ground-truth transitions have a generated dataset's fields, shapes and robot signature, train
    beside it as one dataset, stay within the budget, and replaying their torques reproduces their states."""
    root, models, policy = tiny
    path = tmp_path / "policy.hdf5"
    summary = collect_policy_data(rl_config(models[0]), policy, path, num_transitions=95, trajectory_length=10,
                                  progress=False)
    assert summary.num_transitions == summary.simulated_transitions <= 95
    assert summary.num_transitions >= 80
    generate_dataset(GenerationConfig("Cartpole", 40, trajectory_length=10, num_envs=4), tmp_path / "gen.hdf5",
                     progress=False)
    with h5py.File(path) as f, h5py.File(tmp_path / "gen.hdf5") as g:
        assert {k: f["data"][k].shape[2:] for k in f["data"]} == {k: g["data"][k].shape[2:] for k in g["data"]}
        states, next_states, torques = (f["data"][k][:] for k in ("states", "next_states", "joint_acts"))
    attrs, gen_attrs = read_attrs(path), read_attrs(tmp_path / "gen.hdf5")
    assert RobotSignature.from_dict(attrs) == RobotSignature.from_dict(gen_attrs)
    for key in ("state_dim", "joint_act_dim", "frame_dt", "solver", "newton_version", "state_names"):
        assert attrs[key] == gen_attrs[key], key
    assert attrs["policy_data"]["stochastic"] is True
    windows = TrajectoryWindows([tmp_path / "gen.hdf5", path], history=10)
    assert windows.num_trajectories == 4 + summary.num_trajectories
    # Trajectories are continuous, and the recorded torques replayed in a fresh ground truth give the same motion.
    assert torch.equal(torch.from_numpy(states[:, 1:]), torch.from_numpy(next_states[:, :-1]))
    env = make_env("Cartpole", states.shape[0])
    env.set_states(torch.from_numpy(states[:, 0]))
    for t in range(states.shape[1]):
        env.step_with_joint_act(torch.from_numpy(torques[:, t]))
        torch.testing.assert_close(env.get_states(), torch.from_numpy(next_states[:, t]), atol=1e-5, rtol=1e-5)
    # The exploration noise is the policy's: the mean action gives other torques.
    mean_path = tmp_path / "mean.hdf5"
    collect_policy_data(rl_config(models[0]), policy, mean_path, 95, 10, stochastic=False, progress=False)
    with h5py.File(mean_path) as f:
        assert not torch.equal(torch.from_numpy(f["data"]["joint_acts"][:]), torch.from_numpy(torques))


def step_rewards(cfg, steps: int = 5):
    vec_env = make_vec_env(cfg.env, seed=3)
    vec_env.reset()
    generator = torch.Generator().manual_seed(0)
    rewards, disagreement, terminated, terms = [], [], [], []
    for _ in range(steps):
        actions = torch.rand(vec_env.num_envs, 1, generator=generator) * 2 - 1
        _, reward, _, infos = vec_env.step(actions)
        rewards.append(reward)
        disagreement.append(infos.get("disagreement", torch.zeros_like(reward)))
        terminated.append(infos["terminated"])
        terms.append(infos["reward_terms"])
    return torch.stack(rewards), torch.stack(disagreement), torch.stack(terminated), terms


def test_disagreement_penalty_changes_rewards_only_where_the_members_disagree(tiny):
    """Members that agree (one model twice) leave every reward as it was; members that disagree lower each reward
    by exactly penalty x disagreement, reported as the reward term 'disagreement'; the cutoff ends episodes."""
    _, (a, b), _ = tiny
    plain, _, _, _ = step_rewards(rl_config([a, a]))
    same, zero, _, _ = step_rewards(rl_config([a, a], disagreement_penalty=5.0))
    assert torch.equal(zero, torch.zeros_like(zero)) and torch.equal(same, plain)
    plain, _, plain_terminated, _ = step_rewards(rl_config([a, b]), steps=1)
    penalised, spread, _, terms = step_rewards(rl_config([a, b], disagreement_penalty=5.0), steps=1)
    assert bool((spread > 0).all())
    torch.testing.assert_close(penalised, plain - 5.0 * spread)
    torch.testing.assert_close(terms[0]["disagreement"], -5.0 * spread[0])
    # Episodes are cut where the disagreement exceeds the cutoff, and only there.
    cutoff = float(spread[0].median())
    _, seen, terminated, _ = step_rewards(rl_config([a, b], disagreement_cutoff=cutoff), steps=1)
    assert torch.equal(terminated[0], plain_terminated[0] | (seen[0] > cutoff))
    assert 0 < int(terminated[0].sum()) < len(terminated[0])


def test_training_records_each_reward_term_and_the_disagreement_per_epoch(tiny, tmp_path):
    """PPO in a penalised ensemble records, per epoch, the mean per env-step of every reward term and of the members'
    disagreement (the penalty term is exactly -penalty x the disagreement), in its summary and in TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, (a, b), _ = tiny
    cfg = rl_config([a, b], disagreement_penalty=5.0)
    summary = train_policy(cfg, tmp_path / "ppo", max_epochs=2, progress=False)
    record = summary["epochs"][-1]
    assert set(record["reward_terms"]) == set(step_rewards(cfg, steps=1)[3][0]) >= {"disagreement"}
    assert record["disagreement"] > 0
    assert record["reward_terms"]["disagreement"] == pytest.approx(-5.0 * record["disagreement"], rel=1e-5)
    events = EventAccumulator(str(tmp_path / "ppo" / "summaries"))
    events.Reload()
    logged = events.Scalars("ensemble/disagreement")
    assert [e.step for e in logged][-1] == record["epoch"]
    assert logged[-1].value == pytest.approx(record["disagreement"], rel=1e-5)


def test_disagreement_options_need_an_ensemble_and_evaluation_ignores_them(tiny, tmp_path):
    root, (a, b), policy = tiny
    with pytest.raises(UserError, match="need an ensemble"):
        make_vec_env(rl_config(a, disagreement_penalty=1.0).env)
    with pytest.raises(ConfigError, match="disagreement_penalty"):
        load_rl_config(CARTPOLE_CFG, ["env.disagreement_penalty=-1"])
    # Playback reports the task's reward: the same with and without the training-time penalty.
    plain = play_policy(rl_config([a, b]), policy, num_games=8)
    penalised = play_policy(rl_config([a, b], disagreement_penalty=50.0, disagreement_cutoff=1e-6), policy, 8)
    assert plain["episode_rewards"] == penalised["episode_rewards"]


def loop_config(root, models, **changes) -> TransferConfig:
    for split, seed in (("train", 0), ("valid", 1)):
        if not (root / f"base_{split}.hdf5").exists():
            generate_dataset(GenerationConfig("Cartpole", 200, trajectory_length=10, num_envs=20, seed=seed),
                             root / f"base_{split}.hdf5", progress=False)
    train_cfg = {"env_name": "Cartpole", "model": TINY_MODEL, "batch_size": 16, "batches_per_epoch": 5,
                 "valid_batches": 2, "rollout_eval": {"num_envs": 4, "horizon": 10},
                 "dataset": {"train": "unused", "valid": "unused"}}
    (root / "train.yaml").write_text(yaml.safe_dump(train_cfg))
    data = {"rl_cfg": CARTPOLE_CFG, "nerd_model_path": models, "rounds": 2, "epochs_per_round": 1, "num_envs": 8,
            "rl_overrides": ["params.config.mini_epochs=1", "env.episode_length=20"],
            "refine": {"train_cfg": str(root / "train.yaml"), "gt_fraction": 0.5, "finetune_minutes": 0.002,
                       "base_train": [str(root / "base_train.hdf5")], "base_valid": [str(root / "base_valid.hdf5")],
                       "trajectory_length": 10, "valid_fraction": 0.25},
            "evaluation": {"num_games": 4, "num_envs": 4}}
    data.update(changes)
    return from_dict(TransferConfig, data)


def test_transfer_loop_refines_the_models_resumes_and_reports_its_cost(tiny, tmp_path, capsys, monkeypatch):
    """Two rounds in an ensemble of two tiny models: PPO, ground-truth data of the policy within the budget, the
    ensemble's calibration on it, fine-tunes that change each model, PPO continued in them, the table in both
    simulators; a resume reruns only what is missing."""
    _, (a, b), _ = tiny
    cfg = loop_config(tmp_path, [a, b])
    table = run_transfer_loop(cfg, tmp_path / "loop", progress=False)
    state = json.loads((tmp_path / "loop/loop.json").read_text())
    first, second = state["rounds"]
    assert first["ppo_env_steps"] == 1 * 8 * 32
    assert 0 < first["gt_transitions"] <= 0.5 * first["ppo_env_steps"]
    assert table["loop"]["gt_transitions"] == first["gt_transitions"] and "gt_transitions" not in second
    refined = first["refined_models"]
    assert len(refined) == 2 and second["nerd_models"] == refined and state["final"]["nerd_models"] == refined
    for old, new in zip((a, b), refined, strict=True):
        start, _, _ = load_checkpoint(old)
        tuned, _, _ = load_checkpoint(new)
        assert any(not torch.equal(p, q) for p, q in zip(start.state_dict().values(), tuned.state_dict().values(),
                                                         strict=True))
    assert first["model_error"]["windows"] > 0 and "rank_correlation" in first["model_error"]
    before, after = first["model_error_valid"], first["refined_model_error_valid"]
    assert before["models"] == [a, b] and after["models"] == refined and before["mean_error"] != after["mean_error"]
    assert table["loop"]["rounds"][0]["model_error"] == first["model_error"]
    # The second round continued the first round's policy (rl-games' epoch count goes on).
    ppo = json.loads((tmp_path / "loop/round_1/ppo/train_summary.json").read_text())
    assert ppo["epochs"] == [] or ppo["epochs"][0]["epoch"] >= 2
    rows = table["rows"][-1]
    assert rows[GROUND_TRUTH]["num_games"] == 4 and "relative_gap" in rows
    assert (tmp_path / "loop/eval.md").is_file()

    # A loop directory is refused without --resume or --overwrite, and a resume of another config too.
    with pytest.raises(UserError, match="--resume continues it"):
        run_transfer_loop(cfg, tmp_path / "loop", progress=False)
    with pytest.raises(UserError, match="another config"):
        run_transfer_loop(loop_config(tmp_path, [a, b], epochs_per_round=2), tmp_path / "loop", resume=True,
                          progress=False)
    with pytest.raises(UserError, match=r"has run 2 of them .* \(rounds >= 2\)"):
        run_transfer_loop(loop_config(tmp_path, [a, b], rounds=1), tmp_path / "loop", resume=True, progress=False)
    # The evaluation may change on a resume: every round's policy is evaluated afterwards, nothing else reruns.
    kept = (tmp_path / "loop/round_0/ppo/nn/last.pth").stat().st_mtime_ns
    run_transfer_loop(loop_config(tmp_path, [a, b], evaluation={"num_games": 4, "num_envs": 4, "every_round": True}),
                      tmp_path / "loop", resume=True, progress=False)
    assert (tmp_path / "loop/round_0/eval.md").is_file() and (tmp_path / "loop/round_1/eval.md").is_file()
    assert (tmp_path / "loop/round_0/ppo/nn/last.pth").stat().st_mtime_ns == kept
    state = json.loads((tmp_path / "loop/loop.json").read_text())
    assert state["rounds"][0]["eval"]["ground_truth"] is not None
    # With every round evaluated, the final table is the last round's, not a second evaluation of that policy.
    unfinished = copy.deepcopy(state)
    del unfinished["final"]
    (tmp_path / "loop/loop.json").write_text(json.dumps(unfinished))
    with monkeypatch.context() as patch:
        patch.setattr("nerd.rl.transfer._evaluate", lambda *a, **k: pytest.fail("the last policy evaluated twice"))
        final = run_transfer_loop(loop_config(tmp_path, [a, b], evaluation={"num_games": 4, "num_envs": 4,
                                                                             "every_round": True}),
                                  tmp_path / "loop", resume=True, progress=False)
    last_round = json.loads((tmp_path / "loop/round_1/eval.json").read_text())
    assert final["rows"] == last_round["rows"] and "loop" in final
    state = json.loads((tmp_path / "loop/loop.json").read_text())
    assert state["final"]["eval"] == state["rounds"][1]["eval"]
    # Interrupted after the first round: the resume reruns the second round only.
    kept = (tmp_path / "loop/round_0/ppo/nn/last.pth").stat().st_mtime_ns
    partial = copy.deepcopy(state)
    partial["rounds"] = partial["rounds"][:1]
    del partial["final"]
    (tmp_path / "loop/loop.json").write_text(json.dumps(partial))
    run_transfer_loop(cfg, tmp_path / "loop", resume=True, progress=False)
    assert (tmp_path / "loop/round_0/ppo/nn/last.pth").stat().st_mtime_ns == kept
    resumed = json.loads((tmp_path / "loop/loop.json").read_text())
    assert len(resumed["rounds"]) == 2 and "final" in resumed
    # Killed during a fine-tune (after its first checkpoint, before its summary): the fine-tune resumes from its
    # nn/last.pt instead of starting over (its best.pt is not rewritten: the spent budget ends it at once).
    partial = copy.deepcopy(resumed)
    for key in ("refined_models", "finetune_best_valid_loss", "model_error_valid", "refined_model_error_valid"):
        partial["rounds"][0].pop(key, None)
    partial["rounds"] = partial["rounds"][:1]
    del partial["final"]
    (tmp_path / "loop/loop.json").write_text(json.dumps(partial))
    tuned = tmp_path / "loop/round_0/model_0"
    (tuned / "summary.yaml").unlink()
    best = (tuned / "nn/best.pt").stat().st_mtime_ns
    run_transfer_loop(cfg, tmp_path / "loop", resume=True, progress=False)
    assert (tuned / "summary.yaml").is_file() and (tuned / "nn/best.pt").stat().st_mtime_ns == best
    assert json.loads((tmp_path / "loop/loop.json").read_text())["rounds"][0]["refined_models"] == refined


def test_the_final_policy_may_be_chosen_among_the_last_rounds_in_nerd(tiny, tmp_path, monkeypatch):
    """evaluation.select_rounds: the candidates play in the final model only (never the ground truth), the best
    wins and is the one the final table evaluates; a resume that changes the choice's settings re-evaluates only
    when the choice changes; more candidates than rounds is a config error."""
    _, (a, _), _ = tiny
    loop = tmp_path / "loop"
    evaluation = {"num_games": 4, "num_envs": 4}
    run_transfer_loop(loop_config(tmp_path, a, refine=None), loop, progress=False)
    state = json.loads((loop / "loop.json").read_text())
    first, second = (r["policy"] for r in state["rounds"])
    assert state["final"]["policy"] == second and "selection" not in state["final"]
    played = []
    plain = transfer.batch_evaluate

    def round_0_best(cfg, *args, **kwargs):
        played.append((cfg.checkpoints, cfg.simulators, cfg.seed, cfg.num_games))
        table = plain(cfg, *args, **kwargs)
        if cfg.simulators == ["neural"]:
            table["rows"][0]["neural"]["mean"] = table["rows"][1]["neural"]["mean"] + 1.0
        return table

    monkeypatch.setattr(transfer, "batch_evaluate", round_0_best)
    table = run_transfer_loop(loop_config(tmp_path, a, refine=None,
                                          evaluation={**evaluation, "select_rounds": 2, "select_games": 3}),
                              loop, resume=True, progress=False)
    assert played[0] == ([first, second], ["neural"], 600, 3)
    assert played[1][0] == [first] and len(played) == 2
    state = json.loads((loop / "loop.json").read_text())
    selection = state["final"]["selection"]
    assert selection["round"] == 0 and state["final"]["policy"] == first == table["rows"][0]["policy"]
    assert [c["round"] for c in selection["candidates"]] == [0, 1] and table["selection"] == selection
    # Another choice's settings, the same choice: the final table stays.
    played.clear()
    run_transfer_loop(loop_config(tmp_path, a, refine=None,
                                  evaluation={**evaluation, "select_rounds": 2, "select_games": 2}),
                      loop, resume=True, progress=False)
    assert len(played) == 1 and played[0][1] == ["neural"]
    # Back to the last round's policy: evaluated again, with no choice made.
    played.clear()
    monkeypatch.setattr(transfer, "batch_evaluate", plain)
    table = run_transfer_loop(loop_config(tmp_path, a, refine=None, evaluation=evaluation), loop, resume=True,
                              progress=False)
    state = json.loads((loop / "loop.json").read_text())
    assert state["final"]["policy"] == second == table["rows"][0]["policy"] and "selection" not in state["final"]
    with pytest.raises(ConfigError, match="evaluation.select_rounds"):
        loop_config(tmp_path, a, evaluation={**evaluation, "select_rounds": 3})


def killed(*args, **kwargs):
    raise KeyboardInterrupt


def test_faithful_loop_trains_in_one_model_and_checks_its_inputs(tiny, tmp_path, monkeypatch):
    """Without refine the loop is plain PPO in the starting model; bad inputs fail before anything runs; a loop
    killed before its first PPO checkpoint leaves nothing, so the same command starts it again."""
    _, (a, _), _ = tiny
    cfg = loop_config(tmp_path, a, refine=None)
    with monkeypatch.context() as patch:
        patch.setattr(transfer, "train_policy", killed)
        with pytest.raises(KeyboardInterrupt):
            run_transfer_loop(cfg, tmp_path / "faithful", progress=False)
    assert not (tmp_path / "faithful").exists()
    run_transfer_loop(cfg, tmp_path / "faithful", progress=False)
    with pytest.raises(UserError, match="--resume continues it"):
        run_transfer_loop(cfg, tmp_path / "faithful", progress=False)
    state = json.loads((tmp_path / "faithful/loop.json").read_text())
    assert [r["nerd_models"] for r in state["rounds"]] == [[a], [a]]
    assert state["final"]["eval"]["ground_truth"] is not None
    with pytest.raises(FileNotFoundError, match="NeRD model not found"):
        run_transfer_loop(loop_config(tmp_path, str(tmp_path / "missing.pt")), tmp_path / "x", progress=False)
    with pytest.raises(ConfigError, match="refine.gt_fraction"):
        loop_config(tmp_path, a, refine={"train_cfg": "x.yaml", "gt_fraction": 2.0})
    (tmp_path / "no_parts").mkdir()
    refine = {**asdict(loop_config(tmp_path, a).refine), "base_train": [str(tmp_path / "no_parts")]}
    with pytest.raises(DatasetError, match="no_parts holds no .hdf5"):
        run_transfer_loop(loop_config(tmp_path, a, refine=refine), tmp_path / "x", progress=False)
    assert not (tmp_path / "x" / "loop.json").exists()


def test_a_rounds_ground_truth_data_stays_within_its_budget_in_whole_trajectories(tiny, tmp_path):
    """The split of a round's ground-truth budget: the validation share rounds to whole trajectories without going
    over the budget (one where the training part keeps one, none where the base validation data stand alone), and
    a budget that cannot hold the data the fine-tunes need fails when the loop starts, naming the key."""
    _, (a, _), _ = tiny
    refine = loop_config(tmp_path, a).refine  # gt_fraction 0.5, valid_fraction 0.25, base_valid given
    shipped = replace(refine, gt_fraction=0.1, valid_fraction=0.1, trajectory_length=100)
    # An Ant round of the shipped recipe: 1828 + 203 trajectories, as the split by transitions gave before.
    assert shipped.data_parts(2_031_616) == {"train": 182_844, "valid": 20_317}
    long = replace(refine, trajectory_length=100)
    # 128 transitions: one trajectory of 100 for training and none held out (whole ones would be 200 > 128).
    assert long.data_parts(256) == {"train": 128, "valid": 0}
    assert long.data_parts(400) == {"train": 100, "valid": 100}  # 200: one of each
    assert replace(refine, trajectory_length=10).data_parts(256) == {"train": 96, "valid": 32}
    with pytest.raises(ConfigError, match="refine.base_valid"):
        replace(long, base_valid=[]).data_parts(256)
    with pytest.raises(ConfigError, match=r"'refine.gt_fraction': 0.5 of a round's 128 PPO env-steps is 64 .*"
                                          r"less than one trajectory of refine.trajectory_length 100"):
        long.data_parts(128)
    # In a loop: refused before its first PPO round (8 envs x 32 steps x 1 epoch = 256 env-steps, 0.1 of them).
    cfg = loop_config(tmp_path, a, refine={**asdict(refine), "gt_fraction": 0.1, "trajectory_length": 100})
    with pytest.raises(ConfigError, match="0.1 of a round's 256 PPO env-steps is 25 ground-truth transitions"):
        run_transfer_loop(cfg, tmp_path / "x", progress=False)
    assert not (tmp_path / "x").exists()


def test_resumes_and_starts_that_cannot_be_honoured_are_one_error_and_lose_nothing(tiny, tmp_path, monkeypatch):
    """What a loop directory refuses, and what it keeps: a resume of nothing creates nothing; a model of another robot
    or a file that is no checkpoint fails before anything runs; a resume of another config names what differs; new
    evaluation settings evaluate again (and are recorded); an unfinished loop does not extend with new settings; an
    --overwrite that fails before its first checkpoint gives the old loop back; a damaged loop.json and another
    run's directory are one error each."""
    _, (a, _), _ = tiny
    cfg = loop_config(tmp_path, [a], rounds=1, refine=None)
    loop = tmp_path / "loop"
    with pytest.raises(UserError, match="nothing to resume"):
        run_transfer_loop(cfg, loop, resume=True, progress=False)
    assert not loop.exists()
    ant = str(REPO / "pretrained_models/NeRD_models/Ant/model.pt")
    with pytest.raises(UserError, match="is a model of Ant, but the task is Cartpole's"):
        run_transfer_loop(loop_config(tmp_path, [ant], rounds=1, refine=None), loop, progress=False)
    (tmp_path / "notes.yaml").write_text("a: 1\n")
    with pytest.raises(UserError, match="is not a loadable nerd checkpoint"):
        run_transfer_loop(loop_config(tmp_path, [str(tmp_path / "notes.yaml")], rounds=1, refine=None), loop,
                          progress=False)
    # A fine-tune that could not start (another model section, joint-limit inputs the config leaves out) fails now,
    # not after the first PPO round and collection.
    shipped = str(REPO / "pretrained_models/NeRD_models/Cartpole/model.pt")
    refine = asdict(loop_config(tmp_path, [a]).refine)
    with pytest.raises(ConfigError, match="its model differs from the config's 'model' section"):
        run_transfer_loop(loop_config(tmp_path, [shipped], rounds=1, refine=refine), loop, progress=False)
    without_limits = {**refine, "train_cfg": str(REPO / "pretrained_models/NeRD_models/Cartpole/train_config.yaml"),
                      "train_overrides": ["joint_limit_inputs=false", "joint_limit_lookahead=false"]}
    with pytest.raises(ConfigError, match="config key 'joint_limit_inputs'"):
        run_transfer_loop(loop_config(tmp_path, [shipped], rounds=1, refine=without_limits), loop, progress=False)
    assert not loop.exists()

    run_transfer_loop(cfg, loop, progress=False)
    with pytest.raises(UserError, match=r"another config \(epochs_per_round 1 -> 2; seed 0 -> 3\)"):
        run_transfer_loop(loop_config(tmp_path, [a], rounds=1, refine=None, epochs_per_round=2), loop, seed=3,
                          resume=True, progress=False)
    more_games = loop_config(tmp_path, [a], rounds=1, refine=None, evaluation={"num_games": 6, "num_envs": 6})
    table = run_transfer_loop(more_games, loop, resume=True, progress=False)
    assert table["rows"][-1][GROUND_TRUTH]["num_games"] == 6
    assert json.loads((loop / "eval.json").read_text())["rows"][-1][GROUND_TRUTH]["num_games"] == 6
    assert yaml.safe_load((loop / "config.yaml").read_text())["evaluation"]["num_games"] == 6

    state = json.loads((loop / "loop.json").read_text())
    unfinished = {k: v for k, v in state.items() if k != "final"}
    (loop / "loop.json").write_text(json.dumps(unfinished))
    with pytest.raises(UserError, match="has not finished; it resumes with its own epochs_per_round"):
        run_transfer_loop(loop_config(tmp_path, [a], rounds=2, refine=None, epochs_per_round=2), loop, resume=True,
                          progress=False)
    (loop / "loop.json").write_text(json.dumps(state))

    with monkeypatch.context() as patch:
        patch.setattr(transfer, "train_policy", killed)
        with pytest.raises(KeyboardInterrupt):
            run_transfer_loop(cfg, loop, overwrite=True, progress=False)
    assert json.loads((loop / "loop.json").read_text()) == state and (loop / "round_0/ppo/nn/last.pth").is_file()
    assert not (loop / ".previous_run").exists()

    # A copy of the loop continues from its own files: the original is out of reach.
    shutil.copytree(loop, tmp_path / "copy")
    loop.rename(tmp_path / "moved_away")
    run_transfer_loop(loop_config(tmp_path, [a], rounds=2, refine=None), tmp_path / "copy", resume=True,
                      progress=False)
    copied = json.loads((tmp_path / "copy/loop.json").read_text())
    assert copied["logdir"] == str(tmp_path / "copy")
    assert [r["policy"] for r in copied["rounds"]] == [str(tmp_path / f"copy/round_{k}/ppo/nn/last.pth")
                                                        for k in (0, 1)]
    (tmp_path / "moved_away").rename(loop)

    (loop / "loop.json").write_text("{")
    with pytest.raises(UserError, match="loop.json is damaged"):
        run_transfer_loop(cfg, loop, resume=True, progress=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.yaml").write_text("x: 1\n")
    with pytest.raises(UserError, match=r"holds another run's files \(config.yaml\)"):
        run_transfer_loop(cfg, other, progress=False)


def test_a_continued_run_keeps_the_adaptive_learning_rate(tiny, tmp_path):
    """A run continued from a checkpoint goes on at the learning rate the adaptive schedule had reached, not at
    the config's: from 1e-8 (the schedule's floor is 1e-6, its steps x1.5 per minibatch) it stays near 1e-6, where
    a restart at the config's 3e-4 could not fall below 3e-4 / 1.5^8 = 1.2e-5 in one epoch of 8 minibatches."""
    root, models, policy = tiny
    state = load_rl_games_checkpoint(policy)
    for group in state["optimizer"]["param_groups"]:
        group["lr"] = 1e-8
    torch.save(state, tmp_path / "slow.pth")
    summary = train_policy(rl_config(models[0]), tmp_path / "continued", max_epochs=2, progress=False,
                           init_from=tmp_path / "slow.pth")
    lr = load_rl_games_checkpoint(summary["last_checkpoint"])["optimizer"]["param_groups"][0]["lr"]
    assert lr <= 2e-6


def test_a_ppo_round_killed_midway_continues_from_its_last_checkpoint(tiny, tmp_path, monkeypatch):
    """A round killed after its epoch-2 checkpoint continues from epoch 2 (not from 0), also when the resumed run
    is killed again before its own first checkpoint; the finished round leaves no resume state behind."""
    _, (a, _), _ = tiny
    cfg = loop_config(tmp_path, a, refine=None, rounds=1, epochs_per_round=4)
    monkeypatch.setattr(rl_train, "RESUME_EVERY_EPOCHS", 2)
    plain = ProgressObserver.after_print_stats

    def kill_at(epoch: int, before_save: bool):
        def stats(self, frame, epoch_num, total_time):
            if epoch_num == epoch and before_save:
                raise KeyboardInterrupt
            plain(self, frame, epoch_num, total_time)
            if epoch_num == epoch:
                raise KeyboardInterrupt
        return stats

    loop = tmp_path / "loop"
    monkeypatch.setattr(ProgressObserver, "after_print_stats", kill_at(2, before_save=False))
    with pytest.raises(KeyboardInterrupt):
        run_transfer_loop(cfg, loop, progress=False)
    assert load_rl_games_checkpoint(loop / "round_0/ppo/nn/resume.pth")["epoch"] == 2
    # The resumed run is killed in its first epoch (3), before writing a state of its own.
    monkeypatch.setattr(ProgressObserver, "after_print_stats", kill_at(3, before_save=True))
    with pytest.raises(KeyboardInterrupt):
        run_transfer_loop(cfg, loop, resume=True, progress=False)
    assert load_rl_games_checkpoint(loop / "round_0/ppo" / KEPT_STATE)["epoch"] == 2
    monkeypatch.setattr(ProgressObserver, "after_print_stats", plain)
    run_transfer_loop(cfg, loop, resume=True, progress=False)
    record = json.loads((loop / "loop.json").read_text())["rounds"][0]
    assert record["ppo_resumed_from_epoch"] == 2
    ppo = json.loads((loop / "round_0/ppo/train_summary.json").read_text())
    assert [e["epoch"] for e in ppo["epochs"]] == [1, 2, 3, 4]  # the killed part's history is kept
    assert load_rl_games_checkpoint(loop / "round_0/ppo/nn/last.pth")["epoch"] == 4
    assert not (loop / "round_0/ppo/nn/resume.pth").exists()
    assert not (loop / "round_0/ppo" / KEPT_STATE).exists()


def test_a_resumed_run_reports_the_episodes_it_finished_before_the_kill(tiny, tmp_path, monkeypatch):
    """A run killed after its epoch-2 state continues rl-games' window of finished episodes: its first report after
    the resume averages the episodes of epochs 1-3, not only those that ended after the restart (8 envs each
    finish one 20-step episode per 32-step epoch; without the window the resumed epoch 3 would count 8 episodes)."""
    _, (a, _), _ = tiny
    seen: dict[int, tuple[int, float]] = {}
    plain = ProgressObserver.after_print_stats

    def stats(self, frame, epoch_num, total_time):
        seen[epoch_num] = (len(self.algo.game_rewards), float(self.algo.game_rewards.get_mean()[0]))
        plain(self, frame, epoch_num, total_time)
        if epoch_num == 2 and not resumed:
            raise KeyboardInterrupt

    resumed = False
    monkeypatch.setattr(ProgressObserver, "after_print_stats", stats)
    with pytest.raises(KeyboardInterrupt):
        train_policy(rl_config(a), tmp_path / "ppo", max_epochs=3, progress=False, checkpoint_every=1)
    saved = load_rl_games_checkpoint(tmp_path / "ppo/nn/resume.pth")["nerd_progress"]["episode_stats"]
    assert saved["game_rewards"]["size"] == seen[2][0] > 8
    assert float(saved["game_rewards"]["mean"][0]) == pytest.approx(seen[2][1])
    resumed = True
    summary = train_policy(rl_config(a), tmp_path / "ppo", max_epochs=3, progress=False, resume=True)
    assert seen[3][0] == seen[2][0] + 8
    assert summary["epochs"][-1]["mean_episode_reward"] == pytest.approx(seen[3][1])


def test_a_finished_loop_is_extended_by_a_resume_with_more_rounds(tiny, tmp_path):
    """rounds 1 -> 2 on a finished loop: round 0 is not trained again, its policy is refined after (data and
    fine-tunes it had none of as the last round), round 1 continues it, and the earlier final evaluation is kept."""
    _, (a, _), _ = tiny
    one = loop_config(tmp_path, [a], rounds=1)
    run_transfer_loop(one, tmp_path / "loop", progress=False)
    before = json.loads((tmp_path / "loop/loop.json").read_text())
    assert "gt_transitions" not in before["rounds"][0]
    kept = (tmp_path / "loop/round_0/ppo/nn/last.pth").stat().st_mtime_ns
    table = run_transfer_loop(loop_config(tmp_path, [a], rounds=2), tmp_path / "loop", resume=True, progress=False)
    after = json.loads((tmp_path / "loop/loop.json").read_text())
    assert (tmp_path / "loop/round_0/ppo/nn/last.pth").stat().st_mtime_ns == kept
    first, second = after["rounds"]
    assert first["gt_transitions"] > 0 and second["nerd_models"] == first["refined_models"]
    assert after["final"]["policy"] == second["policy"] != first["policy"]
    assert after["earlier_finals"] == [{"rounds": 1, **before["final"]}]
    assert (tmp_path / "loop/eval_rounds1.json").is_file() and (tmp_path / "loop/eval.json").is_file()
    assert table["loop"]["gt_transitions"] == first["gt_transitions"]
    assert yaml.safe_load((tmp_path / "loop/config.yaml").read_text())["rounds"] == 2


def test_an_unfinished_loop_may_end_sooner_but_keeps_every_round_it_has_refined(tiny, tmp_path, monkeypatch):
    """A 3-round loop killed in round 1's PPO (round 0 refined): a resume with 1 round is refused (round 0's
    refinement would be lost), one with 2 makes round 1 the last (its PPO finished, the final table written), and
    the shorter loop extends back to 3 as any finished loop does."""
    _, (a, _), _ = tiny
    plain = ProgressObserver.after_print_stats

    def kill_in_round_1(self, frame, epoch_num, total_time):
        if epoch_num == 2:
            raise KeyboardInterrupt
        plain(self, frame, epoch_num, total_time)

    loop = tmp_path / "loop"
    with monkeypatch.context() as patch:
        patch.setattr(ProgressObserver, "after_print_stats", kill_in_round_1)
        with pytest.raises(KeyboardInterrupt):
            run_transfer_loop(loop_config(tmp_path, [a], rounds=3), loop, progress=False)
    assert "refined_models" in json.loads((loop / "loop.json").read_text())["rounds"][0]
    with pytest.raises(UserError, match=r"has run 2 of them .* \(rounds >= 2\)"):
        run_transfer_loop(loop_config(tmp_path, [a], rounds=1), loop, resume=True, progress=False)
    table = run_transfer_loop(loop_config(tmp_path, [a], rounds=2), loop, resume=True, progress=False)
    state = json.loads((loop / "loop.json").read_text())
    first, second = state["rounds"]
    assert state["config"]["rounds"] == 2 and yaml.safe_load((loop / "config.yaml").read_text())["rounds"] == 2
    assert "data" not in second and state["final"]["policy"] == second["policy"]
    assert second["nerd_models"] == first["refined_models"] and table["rows"][-1][GROUND_TRUTH]["num_games"] == 4
    run_transfer_loop(loop_config(tmp_path, [a], rounds=3), loop, resume=True, progress=False)
    state = json.loads((loop / "loop.json").read_text())
    assert len(state["rounds"]) == 3 and state["rounds"][1]["gt_transitions"] > 0
    assert state["earlier_finals"][0]["rounds"] == 2


def test_an_extension_may_switch_to_mean_action_data_and_weight_the_policy_data(tiny, tmp_path):
    """refine.stochastic and refine.policy_weight may change only on a resume that adds rounds; the collections and
    fine-tunes the extension runs use the new values (the policy data files weighted against the base data in the
    fine-tune's loss), each round records the values it ran with, and loop.json records the change. A loop recorded
    before policy_weight existed resumes and extends as one that ran at 1."""
    _, (a, _), _ = tiny
    run_transfer_loop(loop_config(tmp_path, [a]), tmp_path / "loop", progress=False)
    path = tmp_path / "loop/loop.json"
    recorded = json.loads(path.read_text())
    del recorded["config"]["refine"]["policy_weight"]
    path.write_text(json.dumps(recorded))
    run_transfer_loop(loop_config(tmp_path, [a]), tmp_path / "loop", resume=True, progress=False)
    before = json.loads((tmp_path / "loop/loop.json").read_text())
    assert before["rounds"][0]["stochastic"] is True
    assert read_attrs(before["rounds"][0]["data"]["train"])["policy_data"]["stochastic"] is True

    def mean_action(rounds):
        cfg = loop_config(tmp_path, [a], rounds=rounds)
        return replace(cfg, refine=replace(cfg.refine, stochastic=False, policy_weight=20.0))

    with pytest.raises(UserError, match="another config"):
        run_transfer_loop(mean_action(2), tmp_path / "loop", resume=True, progress=False)
    table = run_transfer_loop(mean_action(3), tmp_path / "loop", resume=True, progress=False)
    after = json.loads((tmp_path / "loop/loop.json").read_text())
    first, second, _ = after["rounds"]
    assert first["data"] == before["rounds"][0]["data"] and first["stochastic"] is True  # not collected again
    assert second["stochastic"] is False
    assert read_attrs(second["data"]["train"])["policy_data"]["stochastic"] is False
    assert after["extensions"] == [{"rounds": 2, "changed": {"refine.stochastic": [True, False],
                                                             "refine.policy_weight": [1.0, 20.0]}}]
    assert [r["stochastic"] for r in table["loop"]["rounds"]] == [True, False, None]
    assert [r["finetune_policy_weight"] for r in table["loop"]["rounds"]] == [1.0, 20.0, None]
    unweighted, weighted = (yaml.safe_load((tmp_path / f"loop/round_{k}/model_0/config.yaml").read_text())["dataset"]
                            for k in (0, 1))
    assert unweighted["train_weights"] is None and unweighted["valid_weights"] is None
    assert weighted["train_weights"] == [1.0, 20.0, 20.0] and weighted["valid_weights"] == [1.0, 20.0, 20.0]


def test_an_extension_may_refine_more_often_with_shorter_rounds_and_fine_tunes(tiny, tmp_path, capsys):
    """epochs_per_round, refine.finetune_minutes and the base data may change on a resume that adds rounds: the
    added rounds continue PPO from the epoch the last one ended at, collect their ground-truth share of their own
    env-steps, and fine-tune for the new minutes on the new data (here the policy data alone); a loop recorded
    before rounds kept their end epoch resumes from the right one."""
    _, (a, _), _ = tiny
    cfg = loop_config(tmp_path, [a], epochs_per_round=2)
    run_transfer_loop(cfg, tmp_path / "loop", progress=False)
    path = tmp_path / "loop/loop.json"
    before = json.loads(path.read_text())
    assert [r["ppo_epoch_end"] for r in before["rounds"]] == [2, 4]
    for record in before["rounds"]:  # as recorded before the key existed
        del record["ppo_epoch_end"]
    path.write_text(json.dumps(before))

    shorter = replace(cfg, rounds=4, epochs_per_round=1,
                      refine=replace(cfg.refine, finetune_minutes=0.001, base_train=[], base_valid=[]))
    table = run_transfer_loop(shorter, tmp_path / "loop", resume=True)
    assert "0 base + 3 policy data files" in capsys.readouterr().out
    after = json.loads(path.read_text())
    assert [r["ppo_epoch_end"] for r in after["rounds"]] == [2, 4, 5, 6]
    assert [r["ppo_env_steps"] for r in after["rounds"]] == [2 * 8 * 32, 2 * 8 * 32, 8 * 32, 8 * 32]
    assert 0 < after["rounds"][2]["gt_transitions"] <= 0.5 * 8 * 32
    assert [r.get("finetune_minutes") for r in after["rounds"]] == [0.002, 0.001, 0.001, None]
    assert [r.get("finetune_base_data") for r in after["rounds"]] == [1, 0, 0, None]
    tuned = yaml.safe_load((tmp_path / "loop/round_2/model_0/config.yaml").read_text())["dataset"]
    assert tuned["train"] == [after["rounds"][k]["data"]["train"] for k in range(3)]
    assert tuned["valid"] == [after["rounds"][k]["data"]["valid"] for k in range(3)]
    changed = after["extensions"][0]["changed"]
    assert after["extensions"][0]["rounds"] == 2 and changed["epochs_per_round"] == [2, 1]
    assert changed["refine.finetune_minutes"] == [0.002, 0.001] and changed["refine.base_train"][1] == []
    last = torch.load(tmp_path / "loop/round_3/ppo/nn/last.pth", map_location="cpu", weights_only=False)
    assert last["epoch"] == 6
    assert [r["ppo_epoch_end"] for r in table["loop"]["rounds"]] == [2, 4, 5, 6]


def test_stages_change_the_settings_from_their_round_on_in_one_config(tiny, tmp_path, capsys):
    """A recipe of two stages in one config: rounds of 2 epochs with noisy data and the base data, then from round 1
    rounds of 1 epoch whose refinements (the one before round 1 included) use mean-action data and the policy data
    alone; each round records what it ran with, as an extension of a finished loop would have."""
    _, (a, _), _ = tiny
    stage = {"from_round": 1, "overrides": ["epochs_per_round=1", "refine.base_train=[]", "refine.base_valid=[]",
                                            "refine.stochastic=false"]}
    cfg = loop_config(tmp_path, [a], rounds=3, epochs_per_round=2, stages=[stage])
    assert cfg.for_round(0) is cfg and cfg.for_round(0).refine.stochastic is True
    assert cfg.for_round(2).epochs_per_round == 1 and cfg.for_round(2).refine.base_train == []
    table = run_transfer_loop(cfg, tmp_path / "loop")
    assert "0 base + 1 policy data files" in capsys.readouterr().out
    rounds = json.loads((tmp_path / "loop/loop.json").read_text())["rounds"]
    assert [r["ppo_epoch_end"] for r in rounds] == [2, 3, 4]
    assert [r["ppo_env_steps"] for r in rounds] == [2 * 8 * 32, 8 * 32, 8 * 32]
    assert [r.get("stochastic") for r in rounds] == [False, False, None]
    assert [r.get("finetune_base_data") for r in rounds] == [0, 0, None]
    assert read_attrs(rounds[0]["data"]["train"])["policy_data"]["stochastic"] is False
    assert table["loop"]["ppo_env_steps"] == 4 * 8 * 32
    assert torch.load(tmp_path / "loop/round_2/ppo/nn/last.pth", map_location="cpu", weights_only=False)["epoch"] == 4
    # A resume keeps the stages; other stages are another config unless the resume adds rounds.
    with pytest.raises(UserError, match="another config"):
        run_transfer_loop(replace(cfg, stages=[]), tmp_path / "loop", resume=True, progress=False)


@pytest.mark.parametrize("changes, message", [
    ({"stages": [{"from_round": 1, "overrides": ["rounds=5"]}]}, "'stages\\[0\\].overrides': a stage sets epochs_per"),
    ({"stages": [{"from_round": 0}]}, "'stages\\[0\\].from_round': must be >= 1"),
    ({"stages": [{"from_round": 2}, {"from_round": 1}]}, "'stages\\[1\\].from_round': the stages must start at"),
    ({"stages": [{"from_round": 1, "overrides": ["epochs_per_round=many"]}]},
     "'epochs_per_round': expected an integer.*set by stages\\[0\\]"),
    ({"stages": [{"from_round": 1, "overrides": ["refine.policy_weight=-1"]}]}, "'refine.policy_weight': must be > 0"),
    ({"stages": [{"from_round": 1, "oops": 1}]}, "unknown config key 'stages\\[0\\].oops'"),
    ({"refine": None, "stages": [{"from_round": 1, "overrides": ["refine.stochastic=false"]}]},
     "'stages\\[0\\].overrides': a loop without 'refine'"),
])
def test_a_stage_that_cannot_be_run_is_a_config_error_naming_it(tiny, tmp_path, changes, message):
    _, (a, _), _ = tiny
    with pytest.raises(ConfigError, match=message):
        loop_config(tmp_path, [a], rounds=3, **changes)


def test_ground_truth_control_trains_in_the_ground_truth_and_resumes_older_loops(tiny, tmp_path, capsys):
    """ppo_simulator: ground-truth runs the same PPO rounds in the analytical simulator, evaluated in both; it
    cannot refine; a loop recorded before the key existed (a neural loop) still resumes."""
    _, (a, _), _ = tiny
    table = run_transfer_loop(loop_config(tmp_path, a, refine=None, ppo_simulator=GROUND_TRUTH),
                              tmp_path / "control")
    state = json.loads((tmp_path / "control/loop.json").read_text())
    assert [r["ppo_simulator"] for r in state["rounds"]] == [GROUND_TRUTH, GROUND_TRUTH]
    run = yaml.safe_load((tmp_path / "control/round_1/ppo/config.yaml").read_text())
    assert run["env"]["env_mode"] == GROUND_TRUTH
    assert table["loop"]["ppo_simulator"] == GROUND_TRUTH and table["loop"]["gt_transitions"] == 0
    assert "PPO in the ground truth" in capsys.readouterr().out
    assert set(table["rows"][-1]) >= {GROUND_TRUTH, "neural"}
    with pytest.raises(ConfigError, match="'refine'"):
        loop_config(tmp_path, a, ppo_simulator=GROUND_TRUTH)

    # A neural loop whose loop.json predates the key resumes without running anything again.
    cfg = loop_config(tmp_path, a, refine=None, rounds=1)
    run_transfer_loop(cfg, tmp_path / "old", progress=False)
    path = tmp_path / "old/loop.json"
    old = json.loads(path.read_text())
    del old["config"]["ppo_simulator"]
    path.write_text(json.dumps(old))
    kept = (tmp_path / "old/round_0/ppo/nn/last.pth").stat().st_mtime_ns
    run_transfer_loop(cfg, tmp_path / "old", resume=True, progress=False)
    assert (tmp_path / "old/round_0/ppo/nn/last.pth").stat().st_mtime_ns == kept


def test_calibration_measures_the_ensemble_against_the_true_error(tiny, tmp_path):
    """On ground-truth data: one model twice has zero disagreement and no error within it; two different models
    have a positive disagreement and a finite rank correlation; one model has its error alone."""
    _, (a, b), _ = tiny
    generate_dataset(GenerationConfig("Cartpole", 400, trajectory_length=20, num_envs=20), tmp_path / "d.hdf5",
                     progress=False)
    same = ensemble_calibration([a, a], tmp_path / "d.hdf5")
    assert same["mean_disagreement"] == 0 and same["mean_error"] > 0 and same["within_one_sigma"] == 0
    two = ensemble_calibration([a, b], tmp_path / "d.hdf5", max_windows=100)
    assert two["windows"] == 100 and two["mean_disagreement"] > 0 and 0 < two["within_one_sigma"] < 1
    assert -1 <= two["rank_correlation"] <= 1
    one = ensemble_calibration([a], tmp_path / "d.hdf5")
    assert one["mean_error"] == same["mean_error"] and "mean_disagreement" not in one
    with pytest.raises(UserError, match="at least one model"):
        ensemble_calibration([], tmp_path / "d.hdf5")


@pytest.mark.parametrize("path", sorted((REPO / "cfg/transfer").glob("*/*.yaml")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_transfer_configs_are_valid(path, monkeypatch):
    """Every shipped loop config validates; its RL config, NeRD models and fine-tune config exist and drive the robot
    of its folder (the datasets are the user's to generate, as the config's header says)."""
    from nerd.rl.transfer_config import load_transfer_config

    monkeypatch.chdir(REPO)
    cfg = load_transfer_config(path)
    rl_cfg = load_rl_config(cfg.rl_cfg, cfg.rl_overrides)
    assert rl_cfg.env.robot == path.parent.name
    assert all((REPO / m).is_file() for m in cfg.model_paths)
    if cfg.refine is not None:
        train = yaml.safe_load((REPO / cfg.refine.train_cfg).read_text())
        assert train["env_name"] == path.parent.name
        assert all(p.startswith("data/") and p.endswith(".hdf5") for p in cfg.refine.base_train + cfg.refine.base_valid)
