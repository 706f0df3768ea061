"""What an optimiser step follows and what an epoch is measured by: the learning-rate schedule and the validation
loss."""

from __future__ import annotations

import torch

from nerd.datasets.windows import TrajectoryWindows
from nerd.models.nerd_model import NeRDModel


def get_lr(progress: float, lr_start: float, lr_end: float, warmup: float = 0.0) -> float:
    """The learning rate at ``progress`` (0 at the first step, 1 at the last): a linear rise from 0 to ``lr_start``
    over the first ``warmup`` of the run, then a linear decay to ``lr_end``."""
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup:
        return lr_start * progress / warmup
    frac = (progress - warmup) / (1.0 - warmup)
    return lr_start + frac * (lr_end - lr_start)


@torch.no_grad()
def validation_loss(model: NeRDModel, data: TrajectoryWindows, batch_size: int, batches: int, seed: int) -> float:
    """Mean normalised loss over ``batches`` random validation batches (the same ones every epoch), weighted as
    ``data`` weights its windows."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    losses = [model.loss(x, y, w).item() for x, y, w in data.iterate(batch_size, generator, batches)]
    model.train()
    return sum(losses) / max(len(losses), 1)
