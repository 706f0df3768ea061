"""studies/ablation/ablation.py: the whole ablation study from a spec at a tiny size (tiny datasets made here, about
a second of training per variant, a few rollouts and episodes), its outputs, and that it resumes without redoing
finished work."""

import json

import pytest
import torch
import yaml

from nerd.checkpoint import load_checkpoint
from nerd.generation import GenerationConfig, generate_dataset
from nerd.run_dir import ExclusiveLock
from tests.helpers import REPO, error_lines, run_script

SCRIPT = "studies/ablation/ablation.py"
TINY = ["num_epochs=2", "batches_per_epoch=3", "batch_size=16", "valid_batches=1", "rollout_eval.num_envs=2",
        "rollout_eval.horizon=5", "model.transformer.n_layer=1", "model.transformer.n_head=2",
        "model.transformer.n_embd=16", "model.transformer.head_hidden=[16]"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Tiny pendulum and Ant datasets (train, valid) of 20-step trajectories."""
    root = tmp_path_factory.mktemp("data")
    paths = {}
    for robot, n in (("PendulumWithContact", 400), ("Ant", 200)):
        for split, seed in (("train", 0), ("valid", 1)):
            path = root / robot / f"{split}.hdf5"
            generate_dataset(GenerationConfig(robot, n, trajectory_length=20, num_envs=10, seed=seed), path,
                             progress=False)
            paths[robot, split] = str(path)
    return paths


def spec(data, budget: float = 0.01) -> dict:
    """A spec with both cases, three variants and the shipped Ant run policies, all at a tiny size."""
    policies = [{"rl_cfg": str(REPO / "pretrained_models/RL_policies/Ant/config.yaml"),
                 "checkpoint": str(REPO / "pretrained_models/RL_policies/Ant/run_neural_seed0.pth")},
                {"rl_cfg": str(REPO / "pretrained_models/RL_policies/Ant/run_refined/config.yaml"),
                 "checkpoint": str(REPO / "pretrained_models/RL_policies/Ant/run_refined/run_refined_seed0.pth")}]
    return {
        "budget_minutes": budget, "seed": 0, "reference": "nerd", "overrides": TINY,
        "pendulum": {"base_cfg": str(REPO / "cfg/train/PendulumWithContact/cpu.yaml"),
                     "data": {"train": data["PendulumWithContact", "train"],
                              "valid": data["PendulumWithContact", "valid"]},
                     "rollouts": 4, "num_envs": 4, "horizon": 5},
        "ant": {"base_cfg": str(REPO / "cfg/train/Ant/cpu.yaml"), "overrides": ["model.linear_skip=false"],
                "data": {"train": data["Ant", "train"], "valid": data["Ant", "valid"]},
                "policies": policies, "num_games": 2, "num_envs": 2, "episode_length": 5},
        "variants": {"nerd": [], "e2e": ["model.input_frame=world", "model.contact_inputs=false"],
                     "absolute": ["model.prediction=absolute"]},
        "paper": {"nerd": [1.0, 1.0], "e2e": [56.1, 19.8], "absolute": [26.8, 5.4]},
    }


def run(tmp_path, study, monkeypatch, capsys, *extra):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(study))
    return run_script(SCRIPT, "--spec", str(tmp_path / "spec.yaml"), "--logdir", str(tmp_path / "runs"),
                      "--no-progress", *extra, monkeypatch=monkeypatch, capsys=capsys)


def test_the_study_runs_end_to_end_and_resumes(data, tmp_path, monkeypatch, capsys):
    """Every variant is trained in both cases with its options, both cases are scored relative to NeRD, the JSON,
    Markdown and figure are written; a second run trains and evaluates nothing again."""
    torch_threads = torch.get_num_threads()
    code, out, err = run(tmp_path, spec(data), monkeypatch, capsys)
    torch.set_num_threads(torch_threads)
    assert code == 0, error_lines(err) or err[-3000:]
    runs = tmp_path / "runs"
    record = json.loads((runs / "ablation.json").read_text())
    for case in ("pendulum", "ant"):
        assert record["ratios"][case]["nerd"] == pytest.approx(1.0)
        for variant in ("e2e", "absolute"):
            assert record["ratios"][case][variant] > 0
    _, sig, _ = load_checkpoint(runs / "ant" / "e2e" / "nn" / "last.pt")
    assert (sig.input_frame, sig.contact_inputs) == ("world", False) and "contact_depths" not in sig.input_groups
    _, sig, _ = load_checkpoint(runs / "pendulum" / "absolute" / "nn" / "last.pt")
    assert sig.prediction == "absolute"
    assert len(record["results"]["ant"]["absolute"]["reward_gaps"]) == 2
    assert (runs / "ant" / "ground_truth.json").is_file()
    assert (runs / "ablation.png").stat().st_size > 0
    assert "| e2e |" in (runs / "ablation.md").read_text() and "56.10" in out
    stamps = {p: p.stat().st_mtime_ns for p in runs.rglob("*.pt")}

    code, out, err = run(tmp_path, spec(data), monkeypatch, capsys)
    torch.set_num_threads(torch_threads)
    assert code == 0, error_lines(err) or err[-3000:]
    # Six evaluations and the Ant's ground truth (read to check that the evaluations are of it).
    assert out.count("not trained again") == 6 and out.count("not rerun") == 7
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*.pt")} == stamps

    # A run recorded before an option existed (a key missing from its config.yaml) reads as the option's default.
    recorded = runs / "pendulum" / "absolute" / "config.yaml"
    old = yaml.safe_load(recorded.read_text())
    del old["dataset"]["train_weights"]
    recorded.write_text(yaml.safe_dump(old))
    code, out, err = run(tmp_path, spec(data), monkeypatch, capsys, "--only", "absolute", "--cases", "pendulum")
    torch.set_num_threads(torch_threads)
    assert code == 0 and "pendulum/absolute: trained" in out, error_lines(err) or err[-3000:]

    # A changed variant is not mixed into the study's old runs.
    changed = spec(data)
    changed["variants"]["absolute"] = ["model.prediction=absolute", "history_length=2"]
    code, _, err = run(tmp_path, changed, monkeypatch, capsys, "--only", "absolute", "--cases", "pendulum")
    assert code == 1 and "history_length" in "".join(error_lines(err))
    # Nor are runs of another budget or seed: the same directory is refused, not relabelled.
    for override, expected in (("budget_minutes=0.02", "another time_budget_minutes"),
                               ("seed=7", "another seed (0; the spec's: 7)")):
        code, _, err = run(tmp_path, spec(data), monkeypatch, capsys, "--cases", "pendulum", "--cfg-overrides",
                           override)
        assert code == 1 and expected in "".join(error_lines(err)), err
    # Evaluations of other settings are made again, and the table holds only evaluations of the spec's settings.
    longer = spec(data)
    longer["pendulum"]["horizon"] = 6
    code, out, err = run(tmp_path, longer, monkeypatch, capsys, "--only", "e2e", "--cases", "pendulum")
    torch.set_num_threads(torch_threads)
    assert code == 0 and "pendulum/e2e: evaluated with other horizon than the spec's" in out, err[-3000:]
    assert "pendulum/absolute: left out of the table (other horizon" in out
    record = json.loads((runs / "ablation.json").read_text())
    assert record["results"]["pendulum"]["e2e"]["horizon"] == 6 and "absolute" not in record["results"]["pendulum"]

    # Another process at work on a variant (its lock held here) refuses the work at once, before touching it; a
    # finished variant is still read, so processes with their own --only share the directory.
    stale = (runs / "pendulum" / "absolute" / "ablation_eval.json").read_text()
    held = ExclusiveLock(runs / "pendulum" / ".absolute.study.lock", "held by the test")
    try:
        code, out, err = run(tmp_path, longer, monkeypatch, capsys, "--only", "absolute", "--cases", "pendulum")
        assert code == 1 and "another process is training or evaluating pendulum/absolute" in "".join(
            error_lines(err)), err[-3000:]
        assert (runs / "pendulum" / "absolute" / "ablation_eval.json").read_text() == stale
        code, out, err = run(tmp_path, longer, monkeypatch, capsys, "--only", "e2e", "--cases", "pendulum")
        torch.set_num_threads(torch_threads)
        assert code == 0 and "pendulum/e2e: evaluated" in out, err[-3000:]
    finally:
        held.release()


def test_a_bad_spec_names_its_key(tmp_path, monkeypatch, capsys):
    """An unknown key, a reference that is not a variant and an unknown variant are one-line errors."""
    base = {"budget_minutes": 1, "variants": {"nerd": []},
            "pendulum": {"base_cfg": "cfg/train/PendulumWithContact/cpu.yaml", "data": {"train": "a", "valid": "b"}}}
    for bad, expected in (({**base, "budgett": 2}, "budgett"), ({**base, "reference": "x"}, "reference"),
                          ({**base, "paper": {"nerd": [1.0]}}, "paper.nerd")):
        code, _, err = run(tmp_path, bad, monkeypatch, capsys)
        assert code == 1 and expected in "".join(error_lines(err)), err
    code, _, err = run(tmp_path, base, monkeypatch, capsys, "--only", "mlp")
    assert code == 1 and "unknown variant" in "".join(error_lines(err))
    code, _, err = run(tmp_path, base, monkeypatch, capsys, "--cfg-overrides", "budget_minutes=-1")
    assert code == 1 and "budget_minutes" in "".join(error_lines(err)), err
    for bad, expected in (({**base, "threads": 0}, "'threads'"), ({**base, "paper": {"mlp": [1.0, 1.0]}}, "'paper'"),
                          ({**base, "pendulum": {**base["pendulum"], "rollouts": 0}}, "'pendulum.rollouts'")):
        code, _, err = run(tmp_path, bad, monkeypatch, capsys)
        assert code == 1 and expected in "".join(error_lines(err)), err
    # A variant's mistake fails before any variant trains (the data does not exist either: checked later).
    typo = {**base, "variants": {"nerd": [], "gru": ["model.typ=gru"]}}
    code, _, err = run(tmp_path, typo, monkeypatch, capsys)
    assert code == 1 and "model.typ" in "".join(error_lines(err)) and not (tmp_path / "runs").exists(), err


def test_wrap_split_scores_each_model_on_the_same_rollouts(tmp_path, monkeypatch, capsys):
    """studies/ablation/wrap_split.py: the same model under two names gets the same numbers (every model sees the
    same initial states and the same ground truth), the rollouts split into those that cross ±π and the others, and
    a malformed --models pair is one error line."""
    model = str(REPO / "pretrained_models/NeRD_models/PendulumWithContact/model.pt")
    output = tmp_path / "split.json"
    code, out, _ = run_script("studies/ablation/wrap_split.py", "--models", f"a={model}", f"b={model}",
                              "--num-rollouts", "16", "--rollout-horizon", "30", "--output", str(output),
                              monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, out
    result = json.loads(output.read_text())
    a, b = result["models"]["a"], result["models"]["b"]
    assert a == b and a["all"] > 0
    assert sum(result["rollouts_per_bin"]) == 16 and 0 <= result["rollouts_crossing"] <= 16
    crossing = result["rollouts_crossing"]
    parts = [(a["crossing"], crossing), (a["not_crossing"], 16 - crossing)]
    assert sum(mean * n for mean, n in parts if n) == pytest.approx(16 * a["all"], rel=1e-6)
    code, _, err = run_script("studies/ablation/wrap_split.py", "--models", model, "--output",
                              str(tmp_path / "x.json"), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and error_lines(err) == [f"error: --models takes name=path pairs, got '{model}'"]
