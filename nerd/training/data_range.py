"""Recording the range of a model's training data in a checkpoint written before models kept it."""

from __future__ import annotations

from pathlib import Path

import torch

from nerd.checkpoint import load_checkpoint, save_checkpoint
from nerd.datasets.windows import TrajectoryWindows


def record_data_range(checkpoint: str | Path, datasets: str | Path | list[str | Path], output: str | Path,
                      device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Write ``checkpoint`` to ``output`` with the range of the data it was trained on, read from ``datasets``
    (every dataset of its lineage: they are read as one, or in turn and joined); for a model saved before models
    kept their range. Returns (low, high). The weights stay as they were.

    Raises:
        UserError: A dataset for another robot or layout than the model.
    """
    model, signature, payload = load_checkpoint(checkpoint, device)
    paths = datasets if isinstance(datasets, list) else [datasets]
    low = high = None
    for path in paths:
        data = TrajectoryWindows(path, payload["history_length"], device, joint_limits=signature.joint_limits,
                                 joint_limit_lookahead=bool(signature.joint_limit_lookahead),
                                 model_options=signature.model_options)
        data.signature.check_compatible(signature, what=f"dataset {path}")
        lo, hi = data.input_range(list(model.input_groups))
        low, high = (lo, hi) if low is None else (torch.minimum(low, lo), torch.maximum(high, hi))
    model.data_range = (low, high)
    save_checkpoint(output, model, signature, payload["config"], history_length=payload["history_length"],
                    epoch=payload.get("epoch", 0), extra=payload.get("extra"))
    return low, high
