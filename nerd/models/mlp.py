"""Feed-forward baseline: the history-1 MLP the paper compares NeRD against.

Also home of the pieces every backbone shares: :func:`build_mlp` (the output head) and
:func:`check_tokens` (the input shape check).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from nerd.config import check_range
from nerd.errors import UserError

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "gelu": nn.GELU,
}


def build_mlp(input_dim: int, hidden: list[int], output_dim: int, activation: str = "relu") -> nn.Sequential:
    """Linear layers of widths ``hidden`` with an activation after each, then a linear output layer.

    Args:
        input_dim: Width of the input features.
        hidden: Widths of the hidden layers; empty gives a single linear map.
        output_dim: Width of the output.
        activation: One of :data:`ACTIVATIONS`.

    Returns:
        A module mapping ``(..., input_dim)`` to ``(..., output_dim)``.

    Raises:
        ValueError: If ``activation`` is not a known name.
    """
    if activation not in ACTIVATIONS:
        raise UserError(
            f"Invalid activation '{activation}'. Valid activations are: {sorted(ACTIVATIONS)}"
        )
    layers: list[nn.Module] = []
    width = input_dim
    for size in hidden:
        layers += [nn.Linear(width, size), ACTIVATIONS[activation]()]
        width = size
    layers.append(nn.Linear(width, output_dim))
    return nn.Sequential(*layers)


@dataclass
class MLPConfig:
    """Options of the MLP baseline."""

    hidden: list[int] = field(default_factory=lambda: [512, 256, 128])
    """Widths of the hidden layers (the release's encoder sizes)."""
    activation: Literal["relu", "tanh", "elu", "gelu"] = "relu"
    """Nonlinearity after each hidden layer."""

    def __post_init__(self) -> None:
        for i, width in enumerate(self.hidden):
            check_range(f"hidden[{i}]", width, low=1)


class MLPModel(nn.Module):
    """Per-time-step MLP: each token is mapped on its own, with no access to the history.

    Attributes:
        max_history: 1; only the token of the current step influences its prediction.
    """

    max_history: int = 1

    def __init__(self, input_dim: int, output_dim: int, cfg: MLPConfig | None = None) -> None:
        """Build the network.

        Args:
            input_dim: Token width D.
            output_dim: Prediction width P.
            cfg: Layer sizes and activation; defaults to :class:`MLPConfig`.
        """
        super().__init__()
        cfg = cfg or MLPConfig()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.net = build_mlp(input_dim, list(cfg.hidden), output_dim, cfg.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map every time step independently.

        Args:
            x: Tokens, shape ``(B, T, D)``.

        Returns:
            Predictions, shape ``(B, T, P)``; position t depends on ``x[:, t]`` only.
        """
        check_tokens(x, self.input_dim)
        return self.net(x)


def check_tokens(x: torch.Tensor, input_dim: int) -> None:
    """Raise a ValueError unless ``x`` has shape ``(B, T, input_dim)`` (shared by all backbones)."""
    if x.ndim != 3 or x.shape[-1] != input_dim:
        raise ValueError(f"expected tokens of shape (B, T, {input_dim}), got {tuple(x.shape)}")
