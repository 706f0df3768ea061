"""Constant tensors made once per device, for code that runs every step.

``torch.tensor(values, device=...)`` or ``x.new_tensor(values)`` inside a rollout step copies Python data from the
host to the device each time; on a GPU such a copy waits for the device, a host synchronisation per call. Step
code takes its constants (unit axes, fixed rotations, offsets, index lists) from :func:`device_constant` instead.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor


def _frozen(values) -> tuple:
    """Nested sequences as nested tuples (hashable, so they can key the cache)."""
    if isinstance(values, (int, float)):
        return values
    return tuple(_frozen(v) for v in values)


@functools.lru_cache(maxsize=512)
def _cached(values: tuple, dtype: torch.dtype, device: torch.device) -> Tensor:
    # An ordinary tensor even when first asked for under inference mode, so autograd code may use it later.
    with torch.inference_mode(False):
        return torch.tensor(values, dtype=dtype, device=device)


def device_constant(values: Sequence, like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """``values`` as a tensor on ``like``'s device, with ``dtype`` (default ``like``'s), built once and cached.

    The result is shared between callers: read it, broadcast or ``expand`` it, never write to it.
    """
    return _cached(_frozen(values), dtype or like.dtype, like.device)
