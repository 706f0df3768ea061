"""GPT-style causal transformer, NeRD's dynamics backbone.

Read top-down: attention, feed-forward, residual block, then the model. Each time step of the history is
one token (a continuous vector, so the "embedding" is a linear layer rather than a lookup table), and the
causal mask lets the prediction at step t see steps 0..t only. That is what allows training on every
position of a window at once (teacher forcing) while inference uses the last position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from nerd.config import check_range
from nerd.errors import UserError
from nerd.models.mlp import build_mlp, check_tokens


@dataclass
class TransformerConfig:
    """Options of the causal transformer (defaults: the release's Cartpole/Pendulum size)."""

    n_layer: int = 6
    """Number of transformer blocks."""
    n_head: int = 12
    """Attention heads per block; must divide ``n_embd``."""
    n_embd: int = 192
    """Width of the residual stream (192 for Cartpole/Pendulum, 384 for Ant/Anymal/Franka)."""
    block_size: int = 32
    """Longest history, in time steps, the position embedding covers."""
    dropout: float = 0.0
    """Dropout probability on embeddings, attention weights and residual branches."""
    bias: bool = False
    """Whether the blocks' LayerNorms and linear layers (and the final norm/projection) have biases."""
    head_hidden: list[int] = field(default_factory=lambda: [64])
    """Hidden widths of the ReLU MLP head that maps the projected features to the prediction."""

    def __post_init__(self) -> None:
        for key in ("n_layer", "n_head", "n_embd", "block_size"):
            check_range(key, getattr(self, key), low=1)
        check_range("dropout", self.dropout, low=0, high=1)
        for i, width in enumerate(self.head_hidden):
            check_range(f"head_hidden[{i}]", width, low=1)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where token t attends to tokens 0..t only."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        # One matmul produces queries, keys and values for all heads.
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim) so that heads act as a batch dimension.
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.out_proj(y))

    def forward_last(self, x: torch.Tensor, last: torch.Tensor | None) -> torch.Tensor:
        """The output of :meth:`forward` at one position per row only, shape ``(B, C)``.

        Args:
            x: ``(B, T, C)`` normalised tokens; keys and values come from every position.
            last: ``(B,)`` the position of each row's query (it attends to positions ``0..last[b]``), or None
                for the last position ``T - 1`` of every row.
        """
        B, T, C = x.shape
        H = self.n_head
        w, b = self.qkv.weight, self.qkv.bias
        query = x[:, -1:] if last is None else x[torch.arange(B, device=x.device), last][:, None]
        # Keys and values of every position, a query at one: the rows of the fused weight split as in forward().
        q = F.linear(query, w[:C], None if b is None else b[:C]).view(B, 1, H, C // H).transpose(1, 2)
        k, v = F.linear(x, w[C:], None if b is None else b[C:]).split(C, dim=2)
        k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (k, v))
        # The causal mask of the query's own position: keys 0..last[b] (all of them for the last position).
        mask = None if last is None else (torch.arange(T, device=x.device) <= last[:, None])[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.resid_dropout(self.out_proj(y.reshape(B, C)))


class FeedForward(nn.Module):
    """Position-wise 4x-wide MLP with GELU."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU()
        self.out_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.out_proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm residual block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = FeedForward(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))

    def forward_last(self, x: torch.Tensor, last: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward` at one position per row (see :meth:`CausalSelfAttention.forward_last`): ``(B, C)``."""
        residual = x[:, -1] if last is None else x[torch.arange(x.shape[0], device=x.device), last]
        x = residual + self.attn.forward_last(self.ln_attn(x), last)
        return x + self.mlp(self.ln_mlp(x))


class TransformerModel(nn.Module):
    """Causal transformer mapping a history of tokens to one prediction per step.

    Attributes:
        max_history: ``block_size``; the longest sequence :meth:`forward` accepts.
    """

    def __init__(self, input_dim: int, output_dim: int, cfg: TransformerConfig | None = None) -> None:
        """Build the network and initialise it.

        Args:
            input_dim: Token width D.
            output_dim: Prediction width P.
            cfg: Sizes; defaults to :class:`TransformerConfig`.

        Raises:
            ValueError: If ``n_embd`` is not a multiple of ``n_head``.
        """
        super().__init__()
        cfg = cfg or TransformerConfig()
        if cfg.n_embd % cfg.n_head != 0:
            raise UserError(
                f"transformer n_embd ({cfg.n_embd}) must be a multiple of n_head ({cfg.n_head})"
            )
        self.cfg = cfg
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.max_history = cfg.block_size

        self.token_embedding = nn.Linear(input_dim, cfg.n_embd)
        self.position_embedding = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_final = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.projection = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.head = build_mlp(cfg.n_embd, list(cfg.head_hidden), output_dim, "relu")

        self.apply(self._init_weights)
        # GPT-2 scaling: each block adds two residual branches, so shrinking their output layers by
        # sqrt(2 * n_layer) keeps the variance of the residual stream independent of depth at init.
        residual_std = 0.02 / math.sqrt(2 * cfg.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.out_proj.weight, mean=0.0, std=residual_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predict at every position from the tokens up to and including it.

        Args:
            x: Tokens, shape ``(B, T, D)`` with ``T <= block_size``.

        Returns:
            Predictions, shape ``(B, T, P)``; position t depends on ``x[:, :t + 1]`` only.

        Raises:
            ValueError: If the shape is wrong or ``T`` exceeds ``block_size``.
        """
        check_tokens(x, self.input_dim)
        T = x.shape[1]
        if T > self.max_history:
            raise ValueError(
                f"sequence length {T} exceeds the transformer's block_size {self.max_history}; "
                "pass a shorter history or build the model with a larger block_size"
            )
        positions = torch.arange(T, device=x.device)
        h = self.embed_dropout(self.token_embedding(x) + self.position_embedding(positions))
        for block in self.blocks:
            h = block(h)
        return self.head(self.projection(self.ln_final(h)))

    def forward_last(self, x: torch.Tensor, last: torch.Tensor | None = None) -> torch.Tensor:
        """The prediction of :meth:`forward` at one position per row, computing only what that position needs.

        Every block but the last runs on all positions (the last block's keys and values need them); the last
        block's query, attention output, MLP, the final norm, the projection and the head run on one position
        per row. Same numbers as ``forward(x)[rows, last]`` up to float rounding, at about
        ``(n_layer - 1) / n_layer`` of its matmul work for a full history. No input validation: the per-step path.

        Args:
            x: Tokens ``(B, T, D)``, ``T <= block_size``.
            last: ``(B,)`` position of each row's prediction (its history length minus one), or None for ``T - 1``.

        Returns:
            ``(B, P)`` predictions.
        """
        T = x.shape[1]
        h = self.embed_dropout(self.token_embedding(x) + self.position_embedding.weight[:T])
        for block in self.blocks[:-1]:
            h = block(h)
        h = self.blocks[-1].forward_last(h, last)
        return self.head(self.projection(self.ln_final(h)))
