"""Every shipped NeRD model loads against today's environments and steps, and its folder documents it."""

import math
from pathlib import Path

import pytest
import torch

from nerd.checkpoint import SHIPPED_MODELS, read_checkpoint
from nerd.evaluation import evaluate_passive
from nerd.modes import NEURAL

REPO = Path(__file__).resolve().parents[2]
MODELS = SHIPPED_MODELS
# One folder per robot (its default model), and folders within it for a robot's other models (e.g. Ant/saturating_held).
SHIPPED = sorted(p.parent for p in MODELS.rglob("model.pt"))


def test_there_are_shipped_models():
    assert {p.name for p in SHIPPED} >= {"Cartpole", "PendulumWithContact", "Ant", "Anymal", "Franka", "CubeToss"}


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: str(p.relative_to(MODELS)))
def test_shipped_model_loads_steps_and_is_documented(folder):
    """The checkpoint's robot signature matches the environment built today (a changed state layout, contact
    count or variant would be refused here), a short neural rollout stays finite, and the README, training config
    and measured metrics ship beside it."""
    payload = read_checkpoint(folder / "model.pt")
    env_name = payload["signature"]["env_name"]
    # The range of its training data, so that evaluation can report rollouts that leave it.
    assert set(payload["data_range"]) == {"low", "high"}
    assert env_name == folder.relative_to(MODELS).parts[0]
    variant = payload["signature"].get("robot_variant") or None
    torch.manual_seed(0)
    result = evaluate_passive(env_name, str(folder / "model.pt"), NEURAL, 2, 2, 3, seed=0, progress=False,
                              robot_variant=variant)
    assert all(math.isfinite(v) for v in result["metrics"].values()), result["metrics"]
    for name in ("README.md", "train_config.yaml"):
        assert (folder / name).is_file(), name
    assert list(folder.glob("metrics_*.json")), "no measured metrics next to the model"
