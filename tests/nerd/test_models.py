"""Tests for the sequence backbones (nerd.models) and the NeRDModel wrapper."""

import dataclasses
import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nerd.config import from_dict
from nerd.models import (
    MODEL_TYPES,
    MLPConfig,
    ModelConfig,
    RNNConfig,
    TransformerConfig,
    TransformerModel,
    build_backbone,
)
from nerd.models.nerd_model import NeRDModel

BLOCK_SIZE = 8
GROUPS = {"states": 3, "contact_depths": 2, "gravity_dir": 3}


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """Run this module's tiny models on one thread and restore the setting afterwards."""
    # Tensors of a few hundred elements gain nothing from intra-op threads, and on a shared 2-core
    # machine two spinning threads per op made the training tests ~10x slower.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def tiny_config(model_type: str) -> ModelConfig:
    """Small sizes so that every test runs in well under a second on a CPU."""
    return ModelConfig(
        type=model_type,
        transformer=TransformerConfig(
            n_layer=2, n_head=2, n_embd=64, block_size=BLOCK_SIZE, head_hidden=[64]
        ),
        mlp=MLPConfig(hidden=[32, 32]),
        rnn=RNNConfig(hidden_size=16, num_layers=2, head_hidden=[16]),
    )


def random_inputs(batch: int, steps: int, device: str = "cpu", groups: dict = GROUPS) -> dict:
    return {name: torch.randn(batch, steps, width, device=device) for name, width in groups.items()}


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_backbone_output_shape_and_history(model_type, device):
    """Every backbone maps (B, T, D) to (B, T, P) and reports its max_history."""
    torch.manual_seed(0)
    model = build_backbone(tiny_config(model_type), input_dim=5, output_dim=3).to(device)
    y = model(torch.randn(4, 6, 5, device=device))
    assert y.shape == (4, 6, 3)
    expected_history = {"transformer": BLOCK_SIZE, "mlp": 1, "gru": 10**9, "lstm": 10**9}[model_type]
    assert model.max_history == expected_history


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_backbone_is_causal(model_type, device):
    """Changing inputs at steps >= k leaves the outputs at steps < k unchanged."""
    torch.manual_seed(0)
    model = build_backbone(tiny_config(model_type), input_dim=5, output_dim=3).to(device).eval()
    x = torch.randn(3, BLOCK_SIZE, 5, device=device)
    with torch.no_grad():
        y = model(x)
        for k in range(1, BLOCK_SIZE):
            x_changed = x.clone()
            x_changed[:, k:] = 5.0 * torch.randn_like(x_changed[:, k:])
            y_changed = model(x_changed)
            torch.testing.assert_close(y_changed[:, :k], y[:, :k], rtol=0, atol=1e-6)
            assert (y_changed[:, k:] - y[:, k:]).abs().max() > 1e-6


@pytest.mark.parametrize("model_type", ["transformer", "gru", "lstm"])
def test_sequence_backbone_uses_history(model_type, device):
    """For sequence backbones, changing the first step changes the predictions at every later step."""
    torch.manual_seed(0)
    model = build_backbone(tiny_config(model_type), input_dim=5, output_dim=3).to(device).eval()
    x = torch.randn(3, BLOCK_SIZE, 5, device=device)
    x_changed = x.clone()
    x_changed[:, 0] += 3.0
    with torch.no_grad():
        diff = (model(x_changed) - model(x)).abs().amax(dim=(0, 2))
    assert torch.all(diff[1:] > 1e-6), diff


def test_mlp_backbone_ignores_history(device):
    """The MLP baseline maps each step on its own: changing step 0 changes only output 0."""
    torch.manual_seed(0)
    model = build_backbone(tiny_config("mlp"), input_dim=5, output_dim=3).to(device)
    x = torch.randn(3, 6, 5, device=device)
    x_changed = x.clone()
    x_changed[:, 0] += 3.0
    with torch.no_grad():
        y, y_changed = model(x), model(x_changed)
    assert torch.equal(y_changed[:, 1:], y[:, 1:])
    assert not torch.equal(y_changed[:, 0], y[:, 0])


def test_transformer_rejects_long_sequence():
    """A sequence longer than block_size raises a ValueError naming both lengths."""
    model = build_backbone(tiny_config("transformer"), input_dim=5, output_dim=3)
    with pytest.raises(ValueError, match=rf"{BLOCK_SIZE + 1}.*block_size {BLOCK_SIZE}"):
        model(torch.randn(2, BLOCK_SIZE + 1, 5))


def test_backbone_rejects_wrong_token_width():
    """A token width other than the one the backbone was built for raises a ValueError."""
    for model_type in MODEL_TYPES:
        model = build_backbone(tiny_config(model_type), input_dim=5, output_dim=3)
        with pytest.raises(ValueError, match=r"\(B, T, 5\)"):
            model(torch.randn(2, 3, 4))


def test_unknown_model_type_lists_valid_names():
    """An unknown model type raises a ValueError that lists every registered type."""
    with pytest.raises(ValueError, match="Unknown model type 'gpt'") as err:
        build_backbone(ModelConfig(type="gpt"), input_dim=5, output_dim=3)
    for name in MODEL_TYPES:
        assert name in str(err.value)


def test_transformer_release_parameter_count():
    """The release transformer (6 layers, 12 heads, n_embd 192) has about 2.7 M parameters."""
    model = TransformerModel(input_dim=6, output_dim=4, cfg=TransformerConfig())
    count = sum(p.numel() for p in model.parameters())
    assert 2.5e6 < count < 2.9e6, count
    # bias=False: the blocks' layers and norms have no biases (the embedding and the head do).
    assert all(not name.endswith("bias") for name, _ in model.blocks.named_parameters())


def test_model_config_from_dict_selects_rnn_cell():
    """A YAML-style mapping builds a ModelConfig whose type fixes the RNN cell without mutating it."""
    cfg = from_dict(ModelConfig, {"type": "lstm", "rnn": {"hidden_size": 8, "num_layers": 1}})
    before = dataclasses.replace(cfg, rnn=dataclasses.replace(cfg.rnn))
    model = build_backbone(cfg, input_dim=5, output_dim=3)
    assert isinstance(model.rnn, torch.nn.LSTM) and model.rnn.hidden_size == 8
    assert cfg == before  # the caller's config is untouched
    gru = build_backbone(dataclasses.replace(cfg, type="gru"), input_dim=5, output_dim=3)
    assert isinstance(gru.rnn, torch.nn.GRU)


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_nerd_model_loss_decreases(model_type):
    """Teacher-forced training on a fixed linear map of the inputs cuts the loss by 10x in 200 Adam steps."""
    torch.manual_seed(0)
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config(model_type))
    mixing = torch.randn(model.input_dim, 4)
    scale = torch.tensor([1.0, 10.0, 0.1, 1.0, 2.0, 5.0, 1.0, 1.0])

    def batch():
        inputs = random_inputs(32, 4)
        raw = torch.cat([inputs[name] for name in GROUPS], dim=-1) * scale
        inputs = dict(zip(GROUPS, raw.split(list(GROUPS.values()), dim=-1), strict=True))
        return inputs, (raw / scale) @ mixing + 3.0

    for _ in range(10):
        model.update_statistics(*batch())
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(200):
        loss = model.loss(*batch())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < 0.1 * first, (first, last)


def test_nerd_model_predicts_raw_units():
    """After training on y = 100 x + 50, predict() returns the target in raw units, not normalised ones."""
    torch.manual_seed(0)
    model = NeRDModel({"x": 1}, output_dim=1, cfg=ModelConfig(type="mlp", mlp=MLPConfig(hidden=[32])))
    x = torch.randn(256, 2, 1)
    model.update_statistics({"x": x}, 100.0 * x + 50.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        xb = torch.randn(64, 2, 1)
        loss = model.loss({"x": xb}, 100.0 * xb + 50.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    x_test = torch.linspace(-1.5, 1.5, 7).reshape(7, 1, 1)
    with torch.no_grad():
        y = model.predict({"x": x_test})
    assert y.shape == (7, 1)
    torch.testing.assert_close(y, 100.0 * x_test[:, -1] + 50.0, rtol=0, atol=5.0)


def test_mlp_predict_uses_only_last_step():
    """For the MLP baseline predict() depends on the last step only."""
    torch.manual_seed(0)
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config("mlp"))
    inputs = random_inputs(2, 5)
    last = {name: x[:, -1:] for name, x in inputs.items()}
    with torch.no_grad():
        assert torch.equal(model.predict(inputs), model.predict(last))


@pytest.mark.parametrize("model_type", ["transformer", "gru"])
def test_predict_with_lengths_reads_each_rows_last_valid_step(model_type):
    """Left-aligned rows of different lengths predict as if each row's valid prefix were run alone."""
    torch.manual_seed(0)
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config(model_type))
    inputs = random_inputs(3, 6)
    lengths = torch.tensor([2, 6, 4])
    with torch.no_grad():
        batched = model.predict(inputs, lengths=lengths)
        alone = [model.predict({n: x[b : b + 1, : int(lengths[b])] for n, x in inputs.items()}) for b in range(3)]
    torch.testing.assert_close(batched, torch.cat(alone), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="lengths must lie in"):
        model.predict(inputs, lengths=torch.tensor([0, 1, 1]))


def test_transformer_predict_crops_to_block_size():
    """predict() on a history longer than block_size uses the last block_size steps."""
    torch.manual_seed(0)
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config("transformer")).eval()
    inputs = random_inputs(2, BLOCK_SIZE + 4)
    recent = {name: x[:, -BLOCK_SIZE:] for name, x in inputs.items()}
    with torch.no_grad():
        assert torch.equal(model.predict(inputs), model.predict(recent))


def test_nerd_model_state_dict_roundtrip(device):
    """A state_dict saved and loaded with weights_only=True into a fresh model gives identical predictions."""
    torch.manual_seed(0)
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config("transformer")).to(device).eval()
    inputs = random_inputs(16, 5, device)
    model.update_statistics(inputs, 7.0 * torch.randn(16, 5, 4, device=device) - 2.0)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)

    torch.manual_seed(1)
    fresh = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config("transformer")).to(device).eval()
    with torch.no_grad():
        assert not torch.equal(fresh.predict(inputs), model.predict(inputs))
        fresh.load_state_dict(torch.load(buffer, weights_only=True, map_location=device))
        assert torch.equal(fresh.predict(inputs), model.predict(inputs))
    assert "target_norm.mean" in model.state_dict() and "input_norms.states.var" in model.state_dict()


def test_nerd_model_rejects_missing_or_misshaped_group():
    """A missing or mis-shaped input group raises a ValueError naming the group and its width."""
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config("mlp"))
    inputs = random_inputs(2, 3)
    del inputs["contact_depths"]
    with pytest.raises(ValueError, match=r"'contact_depths' \(width 2\) is missing"):
        model(inputs)
    inputs["contact_depths"] = torch.randn(2, 3, 5)
    with pytest.raises(ValueError, match=r"'contact_depths' must have shape \(B, T, 2\)"):
        model.predict(inputs)
    with pytest.raises(ValueError, match=r"'contact_depths' must have shape \(\.\.\., 2\)"):
        model.update_statistics(inputs, torch.randn(2, 3, 4))


def test_nerd_model_dimensions():
    """input_dim is the sum of the group widths in their given order and output_dim the target width."""
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config("gru"))
    assert model.input_dim == 8 and model.output_dim == 4
    assert list(model.input_groups) == list(GROUPS)
    assert list(model.input_norms) == list(GROUPS)


def test_transformer_sees_positions():
    """The same token repeated over the history gives different outputs at different positions."""
    torch.manual_seed(0)
    model = build_backbone(tiny_config("transformer"), input_dim=5, output_dim=3).eval()
    x = torch.randn(1, 1, 5).expand(2, BLOCK_SIZE, 5)
    with torch.no_grad():
        y = model(x)
    assert (y[:, 1:] - y[:, :1]).abs().amax(dim=(0, 2)).min() > 1e-6


def test_models_do_not_import_the_engine():
    """nerd.models and nerd.normalization import neither warp nor newton (they stay pure torch)."""
    code = (
        "import sys, nerd.normalization, nerd.models, nerd.models.nerd_model; "
        "bad = sorted(m for m in ('warp', 'newton') if m in sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_linear_skip_learns_a_linear_map_far_better():
    """On a linear target (as Δq ≈ dt·q̇ is), the linear skip path reaches a lower loss (measured 6x) in 300 steps."""
    results = {}
    for skip in (False, True):
        torch.manual_seed(0)
        cfg = dataclasses.replace(tiny_config("transformer"), linear_skip=skip)
        model = NeRDModel(GROUPS, output_dim=4, cfg=cfg)
        mixing = torch.randn(model.input_dim, 4)

        def batch(mixing=mixing):
            inputs = random_inputs(32, 4)
            return inputs, torch.cat([inputs[name] for name in GROUPS], dim=-1) @ mixing

        for _ in range(10):
            model.update_statistics(*batch())
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(300):
            loss = model.loss(*batch())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        results[skip] = sum(model.loss(*batch()).item() for _ in range(5)) / 5
    assert results[True] < 0.3 * results[False], results
    # The path is per token, so the model stays causal, and it travels with the state dict.
    state = model.state_dict()
    assert "skip.weight" in state
    again = NeRDModel(GROUPS, output_dim=4, cfg=cfg)
    again.load_state_dict(state)
    inputs = random_inputs(2, 5)
    torch.testing.assert_close(again(inputs), model(inputs), rtol=0, atol=0)
    cut = {name: x[:, :3] for name, x in inputs.items()}
    torch.testing.assert_close(model(cut), model(inputs)[:, :3], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model_type", sorted(MODEL_TYPES))
def test_last_position_fast_path_matches_the_full_forward(model_type):
    """predict_last (the integrator's per-step path; for the transformer the last block, final norm, projection
    and head on one position only) gives predict()'s numbers for left-aligned rows of different lengths."""
    torch.manual_seed(0)
    model = NeRDModel(GROUPS, output_dim=4, cfg=tiny_config(model_type)).eval()
    with torch.no_grad():  # non-trivial statistics, so that the fast path's own normalisation is exercised
        model.update_statistics({n: 3.0 * torch.randn(64, w) + 1.0 for n, w in GROUPS.items()}, torch.randn(64, 4))
    steps = 1 if model_type == "mlp" else BLOCK_SIZE
    inputs = random_inputs(5, steps)
    lengths = torch.tensor([1, steps, max(1, steps // 2), steps, 1])
    mean, std = model.token_statistics()
    tokens = (torch.cat([inputs[n] for n in GROUPS], dim=-1) - mean) / std
    with torch.inference_mode():
        full = model.predict(inputs, lengths=lengths)
        fast = model.predict_last(tokens, lengths - 1)
        chunked = model.predict_last(tokens, lengths - 1, chunk=2)  # the integrator's CPU path, 3 calls here
    torch.testing.assert_close(fast, full, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(chunked, fast, atol=1e-6, rtol=1e-5)
    if model_type == "transformer":  # last=None: every row's last position
        backbone = model.backbone
        with torch.inference_mode():
            torch.testing.assert_close(backbone.forward_last(tokens), backbone(tokens)[:, -1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("model_type", ["transformer", "mlp"])
def test_a_model_widened_with_a_new_group_predicts_as_before(model_type):
    """with_input_groups (a fine-tune gaining the joint-limit inputs) keeps the predictions whatever the new group
    holds, keeps each old group's statistics, and refuses to drop or resize a group."""
    torch.manual_seed(0)
    cfg = dataclasses.replace(tiny_config(model_type), linear_skip=True)
    model = NeRDModel(GROUPS, output_dim=4, cfg=cfg).eval()
    model.update_statistics(random_inputs(64, 1), torch.randn(64, 1, 4))
    for p in model.parameters():  # non-zero skip weights too, so both first layers are tested
        p.data.add_(0.1 * torch.randn_like(p))
    # The new group in the middle: the old columns must follow their groups, not keep their positions.
    groups = {"states": 3, "joint_limits": 2, "contact_depths": 2, "gravity_dir": 3}
    wider = model.with_input_groups(groups).eval()
    inputs = random_inputs(5, 4, groups=groups)
    inputs["joint_limits"] = 10.0 * inputs["joint_limits"]
    torch.testing.assert_close(wider.predict(inputs), model.predict(inputs), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wider.input_norms["states"].mean, model.input_norms["states"].mean)
    with pytest.raises(ValueError, match=r"lost contact_depths \(2\)"):
        model.with_input_groups({"states": 3, "contact_depths": 1, "gravity_dir": 3})
