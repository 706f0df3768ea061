"""bench/precision_check.py: its float32 reference is the passive evaluation's, and its variants really run in
bfloat16."""

import json
import runpy

import pytest
import torch

from nerd.checkpoint import load_checkpoint, shipped_model_path
from nerd.evaluation import evaluate_passive
from nerd.modes import NEURAL
from tests.scripts.test_entry_points import REPO, error_lines, run_script

SCRIPT = "bench/precision_check.py"


def test_float32_errors_are_the_passive_evaluations_and_bfloat16_differs(tmp_path, monkeypatch, capsys):
    output = tmp_path / "precision.json"
    code, out, err = run_script(SCRIPT, "--num-rollouts", "6", "--num-envs", "4", "--rollout-horizon", "30",
                                "--seed", "3", "--timing-envs", "4", "--seconds", "0.01", "--repeats", "1",
                                "--output", str(output), monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    errors = json.loads(output.read_text())["mean_errors_by_horizon"]
    # Two batches (4 + 2 rollouts), as eval_passive_motion.py would run them.
    reference = evaluate_passive("Cartpole", str(shipped_model_path("Cartpole")), NEURAL, num_envs=4,
                                 num_rollouts=6, horizon=30, seed=3, progress=False)["metrics_by_horizon"]["30"]
    for name, value in reference.items():
        assert errors["float32"][name]["30"] == pytest.approx(value, rel=1e-9)
        for variant in ("bfloat16", "autocast"):
            assert errors[variant][name]["30"] != errors["float32"][name]["30"]
    assert "| bfloat16 |" in out and "| autocast |" in out


@pytest.mark.parametrize("variant", ["bfloat16", "autocast"])
def test_a_variant_predicts_what_float32_does_to_bfloat16_rounding(variant):
    with_precision = runpy.run_path(str(REPO / SCRIPT))["with_precision"]
    model, _, _ = load_checkpoint(shipped_model_path("Cartpole"))
    tokens = torch.randn(32, 10, model.input_dim, generator=torch.Generator().manual_seed(0))
    last = torch.full((32,), 9)
    with torch.inference_mode():
        exact = model.predict_last(tokens, last)
        lowered = with_precision(model, variant).predict_last(tokens, last)
        assert model.predict_last(tokens, last).equal(exact)  # the original is left as it was
    assert lowered.dtype == torch.float32
    error = (lowered - exact).norm() / exact.norm()
    assert 1e-4 < error < 0.1  # bfloat16 keeps 8 bits of mantissa (relative rounding ~4e-3 per operation)


def test_an_existing_output_needs_overwrite(tmp_path, monkeypatch, capsys):
    output = tmp_path / "precision.json"
    output.write_text("{}")
    code, _, err = run_script(SCRIPT, "--output", str(output), monkeypatch=monkeypatch, capsys=capsys)
    assert code != 0 and error_lines(err) == [f"error: {output} already exists; pass --overwrite to replace it"]
    assert output.read_text() == "{}"
