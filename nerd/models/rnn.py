"""Recurrent baselines (GRU and LSTM) that the paper compares NeRD against."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from nerd.config import check_range
from nerd.errors import UserError
from nerd.models.mlp import build_mlp, check_tokens

RNN_CELLS: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}


@dataclass
class RNNConfig:
    """Options of the recurrent baselines (the cell is chosen by ``model.type``: ``gru`` or ``lstm``)."""

    hidden_size: int = 256
    """Width of the recurrent state."""
    num_layers: int = 2
    """Number of stacked recurrent layers."""
    head_hidden: list[int] = field(default_factory=lambda: [64])
    """Hidden widths of the ReLU MLP head applied to the recurrent output at every step."""

    def __post_init__(self) -> None:
        check_range("hidden_size", self.hidden_size, low=1)
        check_range("num_layers", self.num_layers, low=1)
        for i, width in enumerate(self.head_hidden):
            check_range(f"head_hidden[{i}]", width, low=1)


class RNNModel(nn.Module):
    """Stacked GRU or LSTM over the history, with an MLP head at every step.

    The hidden state starts at zero for every sequence, so a prediction depends only on the tokens of
    the window passed in, as for the transformer.

    Attributes:
        max_history: A very large number: a recurrent net has no length limit.
    """

    max_history: int = 10**9

    def __init__(self, input_dim: int, output_dim: int, cfg: RNNConfig | None = None, cell: str = "gru") -> None:
        """Build the network.

        Args:
            input_dim: Token width D.
            output_dim: Prediction width P.
            cfg: Sizes; defaults to :class:`RNNConfig`.
            cell: ``gru`` or ``lstm`` (``model.type`` when built by :func:`~nerd.models.build_backbone`).

        Raises:
            ValueError: If ``cell`` is not a known cell.
        """
        super().__init__()
        cfg = cfg or RNNConfig()
        if cell not in RNN_CELLS:
            raise UserError(f"Invalid RNN cell '{cell}'. Valid cells are: {sorted(RNN_CELLS)}")
        self.cell = cell
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.rnn = RNN_CELLS[cell](
            input_size=input_dim, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, batch_first=True
        )
        self.head = build_mlp(cfg.hidden_size, list(cfg.head_hidden), output_dim, "relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the recurrence over the sequence and predict at every step.

        Args:
            x: Tokens, shape ``(B, T, D)``.

        Returns:
            Predictions, shape ``(B, T, P)``; position t depends on ``x[:, :t + 1]`` only.
        """
        check_tokens(x, self.input_dim)
        features, _ = self.rnn(x)
        return self.head(features)
