"""Every shipped NeRD model loads against today's environments, keeps its measured accuracy, and is documented.

Each model folder holds ``regression_check.json``: the passive error of a small, seeded evaluation (64 rollouts of
100 steps from the task reset) measured when the model shipped. A change to the model, the environments, the
features or the integrator that moves it by more than the stated tolerance fails here. After an intended change,
``python tests/nerd/test_shipped_models.py --update`` measures and rewrites the references (review the diff).
"""

import argparse
import json
import math
from pathlib import Path

import pytest
import torch

from nerd.checkpoint import SHIPPED_MODELS, read_checkpoint
from nerd.evaluation import evaluate_passive
from nerd.modes import NEURAL

MODELS = SHIPPED_MODELS
# One folder per robot (its default model), and folders within it for a robot's other models (e.g. Ant/saturating_held).
SHIPPED = sorted(p.parent for p in MODELS.rglob("model.pt"))
CHECK = {"num_rollouts": 64, "horizon": 100, "seed": 0, "initial_states": "task"}
TOLERANCE = 0.05
"""Relative; the evaluation is deterministic on one machine, the margin allows for other CPUs' float rounding."""


def measure(folder: Path) -> dict[str, float]:
    """The check's metrics for the model in ``folder``."""
    payload = read_checkpoint(folder / "model.pt")
    variant = payload["signature"].get("robot_variant") or None
    torch.manual_seed(0)
    result = evaluate_passive(payload["signature"]["env_name"], str(folder / "model.pt"), NEURAL,
                              CHECK["num_rollouts"], CHECK["num_rollouts"], CHECK["horizon"], seed=CHECK["seed"],
                              progress=False, initial_states=CHECK["initial_states"], robot_variant=variant)
    return result["metrics"]


def test_there_are_shipped_models():
    assert {p.name for p in SHIPPED} >= {"Cartpole", "PendulumWithContact", "Ant", "Anymal", "Franka", "CubeToss"}


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: str(p.relative_to(MODELS)))
def test_shipped_model_keeps_its_accuracy_and_is_documented(folder):
    """The checkpoint's robot signature matches the environment built today (a changed state layout, contact
    count or variant would be refused here), its small evaluation lands within the tolerance of the reference
    stored beside it, and the README, training config, training-data range and measured metrics ship with it."""
    payload = read_checkpoint(folder / "model.pt")
    assert payload["signature"]["env_name"] == folder.relative_to(MODELS).parts[0]
    # The range of its training data, so that evaluation can report rollouts that leave it.
    assert set(payload["data_range"]) == {"low", "high"}
    reference = json.loads((folder / "regression_check.json").read_text())
    assert reference["check"] == CHECK
    metrics = measure(folder)
    assert metrics.keys() == reference["metrics"].keys()
    for name, value in metrics.items():
        expected = reference["metrics"][name]
        assert math.isfinite(value) and abs(value - expected) <= TOLERANCE * expected + 1e-6, \
            f"{name}: {value:.6g} against the shipped {expected:.6g} (tolerance {TOLERANCE:.0%})"
    for name in ("README.md", "train_config.yaml"):
        assert (folder / name).is_file(), name
    assert list(folder.glob("metrics_*.json")), "no measured metrics next to the model"


def test_the_check_catches_a_less_accurate_model(tmp_path):
    """The shipped Cartpole model with 2 % noise on its weights fails its own reference check."""
    payload = torch.load(MODELS / "Cartpole/model.pt", weights_only=True)
    generator = torch.Generator().manual_seed(0)
    for name, weight in payload["model_state"].items():
        if weight.is_floating_point() and "norm" not in name.split(".")[0]:
            weight += 0.02 * weight.std().nan_to_num() * torch.randn(weight.shape, generator=generator)
    torch.save(payload, tmp_path / "model.pt")
    reference = json.loads((MODELS / "Cartpole/regression_check.json").read_text())["metrics"]
    metrics = measure(tmp_path)
    assert any(abs(metrics[k] - v) > TOLERANCE * v for k, v in reference.items()), metrics


def update_references() -> None:
    """Measure every shipped model and rewrite its ``regression_check.json``."""
    for folder in SHIPPED:
        metrics = measure(folder)
        text = json.dumps({"check": CHECK, "metrics": metrics}, indent=2) + "\n"
        (folder / "regression_check.json").write_text(text)
        print(folder.relative_to(MODELS), {k: round(v, 6) for k, v in metrics.items()})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite every model's regression_check.json")
    if parser.parse_args().update:
        update_references()
