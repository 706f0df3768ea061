"""studies/cartpole_rail/cartpole_rail.py: the phase of a transition against the rail's end stops, and the
slow-bounce share."""

import dataclasses
import runpy

import numpy as np
import pytest
import torch

from nerd.checkpoint import load_checkpoint, save_checkpoint
from nerd.features import robot_joint_limits
from nerd.models.nerd_model import NeRDModel
from tests.helpers import REPO


def load_script():
    return runpy.run_path(str(REPO / "studies/cartpole_rail/cartpole_rail.py"))


def test_bounce_phase_tells_free_onset_inside_and_exit_on_both_stops():
    script = load_script()
    phases, bounce_phase = script["PHASES"], script["bounce_phase"]
    start = torch.tensor([0.0, 3.99, 4.05, 4.02, -3.99, -4.05, -4.02])
    end = torch.tensor([0.1, 4.01, 4.08, 3.98, -4.01, -4.08, -3.98])
    assert [phases[k] for k in bounce_phase(start, end)] == ["free", "onset", "inside", "exit"] + [
        "onset", "inside", "exit"]


def test_rail_coverage_counts_only_shallow_slow_states_as_slow_bounces():
    rail_coverage = load_script()["rail_coverage"]
    # (x, θ, ẋ, θ̇): inside; shallow and slow; shallow but fast; deep and slow.
    states = np.array([[3.0, 0, 0.5, 0], [4.05, 0, 0.5, 0], [-4.05, 0, -3.0, 0], [-4.5, 0, 0.1, 0]])
    assert rail_coverage(states, slow_speed=1.5) == {"beyond a limit": 0.75, "slow bounce": 0.25}


def test_one_step_errors_cover_every_window_once(tmp_path):
    """Near-limit starts give every phase; each window's last transition is counted in exactly one of them."""
    from nerd.generation import GenerationConfig, generate_dataset

    cfg = GenerationConfig("Cartpole", 64 * 40, trajectory_length=40, num_envs=64, seed=2, passive=True,
                           initial_states="limits")
    path = str(generate_dataset(cfg, tmp_path / "limits.hdf5", progress=False).path)
    shipped_path = str(REPO / "pretrained_models/NeRD_models/Cartpole/model.pt")
    shipped, sig, payload = load_checkpoint(shipped_path)
    # A model with the release's inputs (random weights) and the same widened with the joint-limit inputs (zero
    # weights): they need windows with different groups, and predict the same. The shipped model reads the group.
    torch.manual_seed(0)
    release_sig = dataclasses.replace(sig, joint_limits=())
    base = NeRDModel(release_sig.input_groups, shipped.output_dim, shipped.cfg)
    model, widened = str(tmp_path / "release_inputs.pt"), str(tmp_path / "widened.pt")
    save_checkpoint(model, base, release_sig, {**payload["config"], "joint_limit_inputs": False},
                    history_length=payload["history_length"])
    limits_sig = dataclasses.replace(sig, joint_limits=robot_joint_limits("Cartpole"))
    save_checkpoint(widened, base.with_input_groups(limits_sig.input_groups), limits_sig, payload["config"],
                    history_length=payload["history_length"])
    result = load_script()["one_step_errors"]([model, widened, shipped_path], path, max_trajectories=64,
                                              device="cpu")
    row = result["models"][model]
    counts = {phase: row[phase]["transitions"] for phase in row}
    assert sum(counts.values()) == 64 * (40 - 10 + 1)
    assert min(counts.values()) > 0
    for name in (model, shipped_path):
        assert all(np.isfinite(v) for phase in result["models"][name].values() for k, v in phase.items()
                   if k != "transitions")
    for phase, errors in result["models"][widened].items():
        assert errors == pytest.approx(row[phase], rel=1e-4), phase
