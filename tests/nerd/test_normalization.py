"""Tests for nerd.normalization.RunningMeanStd."""

import io

import numpy as np
import pytest
import torch

from nerd.normalization import RunningMeanStd


def test_batched_updates_match_numpy(device):
    """Merging uneven batches of any leading shape gives numpy's mean and population variance."""
    rng = np.random.default_rng(0)
    scale = np.array([1.0, 10.0, 0.01, 100.0])
    batches = [
        rng.normal(3.0, 1.0, size=(7, 4)) * scale,
        rng.normal(-2.0, 2.0, size=(3, 5, 4)) * scale,
        rng.normal(0.5, 0.1, size=(1, 4)) * scale,
        rng.normal(1.0, 3.0, size=(2, 2, 6, 4)) * scale,
    ]
    rms = RunningMeanStd(4).to(device)
    for batch in batches:
        rms.update(torch.as_tensor(batch, dtype=torch.float32, device=device))
    data = np.concatenate([b.reshape(-1, 4) for b in batches]).astype(np.float32).astype(np.float64)
    assert rms.count.item() == data.shape[0]
    np.testing.assert_allclose(rms.mean.cpu().numpy(), data.mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rms.var.cpu().numpy(), data.var(axis=0), rtol=1e-10, atol=1e-12)


def test_empty_batch_is_noop():
    """An empty batch leaves the statistics unchanged."""
    rms = RunningMeanStd(2)
    rms.update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    before = {k: v.clone() for k, v in rms.state_dict().items()}
    rms.update(torch.zeros(0, 2))
    for key, value in rms.state_dict().items():
        assert torch.equal(value, before[key])


def test_normalize_denormalize_roundtrip(device):
    """denormalize(normalize(x)) returns x, and normalised training data has zero mean, unit variance."""
    torch.manual_seed(0)
    # float64 data: in float32, x - mean of a feature with std 1e-2 around 4 keeps only ~4 digits.
    scale = torch.tensor([2.0, 50.0, 1e-2, 1.0, 7.0], dtype=torch.float64, device=device)
    x = torch.randn(64, 3, 5, dtype=torch.float64, device=device) * scale + 4.0
    rms = RunningMeanStd(5).to(device)
    rms.update(x)
    y = rms.normalize(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    torch.testing.assert_close(rms.denormalize(y), x, rtol=1e-12, atol=1e-12)
    x32 = x.float()
    assert rms.normalize(x32).dtype == torch.float32
    torch.testing.assert_close(rms.denormalize(rms.normalize(x32)), x32, rtol=1e-5, atol=1e-5)
    flat = y.reshape(-1, 5)
    zeros = torch.zeros(5, dtype=torch.float64, device=device)
    torch.testing.assert_close(flat.mean(0), zeros, atol=1e-10, rtol=0)
    # var / (var + eps) is 1 only up to eps / var, i.e. 0.1 for the feature with variance 1e-4.
    expected_var = rms.var / (rms.var + rms.eps)
    torch.testing.assert_close(flat.var(0, unbiased=False), expected_var, atol=1e-10, rtol=0)


def test_constant_feature_stays_finite():
    """A zero-variance feature (unactuated joint torque) normalises to 0 instead of NaN or inf."""
    x = torch.randn(100, 3)
    x[:, 1] = 0.0
    rms = RunningMeanStd(3)
    rms.update(x)
    y = rms.normalize(x)
    assert torch.isfinite(y).all()
    assert torch.all(y[:, 1] == 0.0)
    torch.testing.assert_close(rms.denormalize(y), x, rtol=0, atol=1e-6)


def test_wrong_width_raises():
    """A tensor whose last axis is not dim raises a ValueError giving the expected shape."""
    rms = RunningMeanStd(3)
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\)"):
        rms.update(torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"\(\.\.\., 3\)"):
        rms.normalize(torch.zeros(4))


def test_state_dict_roundtrip_weights_only():
    """mean, var and count survive torch.save / torch.load(weights_only=True) into a fresh instance."""
    rms = RunningMeanStd(4)
    rms.update(torch.randn(50, 4) * 3.0 + 1.0)
    assert set(rms.state_dict()) == {"mean", "var", "count"}
    buffer = io.BytesIO()
    torch.save(rms.state_dict(), buffer)
    buffer.seek(0)
    fresh = RunningMeanStd(4)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    for key, value in rms.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value)
    x = torch.randn(8, 4)
    assert torch.equal(fresh.normalize(x), rms.normalize(x))
