"""Running mean/variance statistics used to normalise model inputs and targets.

NeRD normalises every input group and the prediction target with statistics computed once over the
training set. The statistics are registered buffers, so they are saved and restored with the model's
``state_dict()`` and a checkpoint reproduces predictions without the dataset.
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Per-feature mean and (population) variance, merged batch by batch.

    Batches are combined with the parallel algorithm of Chan et al., so feeding the data in any
    number of batches gives the mean and variance of the whole data set (``numpy.var`` with
    ``ddof=0``). Statistics are accumulated in float64: a training set holds millions of samples and
    float32 sums would lose the small per-batch corrections.

    A feature whose variance is zero (for example the always-zero torque of an unactuated joint) is
    divided by ``sqrt(eps)`` instead of zero. Its training values equal the mean, so it normalises to
    exactly 0 rather than to NaN or infinity.

    Attributes:
        mean: Running mean, shape ``(dim,)``, float64.
        var: Running population variance, shape ``(dim,)``, float64.
        count: Number of samples merged so far, shape ``()``, float64.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        """Create statistics for a feature vector of width ``dim``.

        Args:
            dim: Number of features (the size of the last axis of every tensor passed in).
            eps: Added to the variance before the square root in :meth:`normalize` and
                :meth:`denormalize`.
        """
        super().__init__()
        if dim <= 0:
            raise ValueError(f"RunningMeanStd needs a positive feature width, got {dim}")
        self.dim = int(dim)
        self.eps = float(eps)
        # Before any update the transform is the identity (mean 0, variance 1 - eps ~ 1).
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("var", torch.ones(dim, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def _check_width(self, x: torch.Tensor, what: str) -> None:
        if x.ndim == 0 or x.shape[-1] != self.dim:
            raise ValueError(
                f"RunningMeanStd.{what}: expected a tensor of shape (..., {self.dim}), got {tuple(x.shape)}"
            )

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the statistics of a batch into the running ones.

        Args:
            x: Samples of shape ``(..., dim)``; every leading index is one sample. An empty batch is a
                no-op.
        """
        self._check_width(x, "update")
        batch = x.detach().reshape(-1, self.dim).to(device=self.mean.device, dtype=torch.float64)
        batch_count = batch.shape[0]
        if batch_count == 0:
            return
        batch_mean = batch.mean(dim=0)
        batch_var = batch.var(dim=0, unbiased=False)

        total = self.count + batch_count
        delta = batch_mean - self.mean
        # Sum of squared deviations of both parts about the merged mean (Chan et al. 1979).
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta.square() * self.count * batch_count / total
        )
        self.mean.add_(delta * batch_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Map raw values to zero mean and unit variance.

        Args:
            x: Raw values of shape ``(..., dim)``.

        Returns:
            ``(x - mean) / sqrt(var + eps)``, same shape and dtype as ``x``.
        """
        self._check_width(x, "normalize")
        mean, std = self._mean_std(x.dtype)
        return (x - mean) / std

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`.

        Args:
            y: Normalised values of shape ``(..., dim)``.

        Returns:
            ``y * sqrt(var + eps) + mean``, same shape and dtype as ``y``.
        """
        self._check_width(y, "denormalize")
        mean, std = self._mean_std(y.dtype)
        return y * std + mean

    def _mean_std(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # The square root is taken in float64 so that tiny variances keep their precision, then the
        # pair is cast to the caller's dtype to avoid promoting the whole network input to float64.
        return self.mean.to(dtype), torch.sqrt(self.var + self.eps).to(dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, eps={self.eps}"
