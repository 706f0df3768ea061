"""The learned part of the NeRD integrator: normalisation + sequence backbone.

Inputs arrive as named groups (state, contact normals, contact points, depths, joint torques, gravity
direction, ...), each of shape ``(B, T, width)`` in the robot-centric frame. Every group is normalised with
its own running statistics, the groups are concatenated in a fixed order into one token per time step,
and the backbone predicts the normalised state change at every step. The statistics live in registered
buffers, so a ``state_dict()`` alone reproduces the model's predictions.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from nerd.models import ModelConfig, build_backbone
from nerd.normalization import RunningMeanStd


class NeRDModel(nn.Module):
    """Normalising wrapper around a causal backbone that predicts one frame's state change.

    Attributes:
        input_norms: One :class:`RunningMeanStd` per input group, in group order.
        target_norm: Statistics of the prediction target.
        backbone: The sequence model built from ``cfg`` (see :func:`nerd.models.build_backbone`).
    """

    def __init__(
        self, input_groups: Mapping[str, int], output_dim: int, cfg: ModelConfig | None = None
    ) -> None:
        """Build the statistics and the backbone.

        Args:
            input_groups: Ordered mapping of group name to its width, e.g. ``{"states": 4,
                "contact_normals": 12, ...}``. The order fixes where each group sits in the token.
            output_dim: Width P of the prediction target.
            cfg: Backbone choice and sizes; defaults to :class:`ModelConfig` (the transformer).

        Raises:
            ValueError: If there are no groups, a width is not a positive integer or a name cannot be a
                module key.
        """
        super().__init__()
        if not input_groups:
            raise ValueError("NeRDModel needs at least one input group")
        for name, width in input_groups.items():
            if not isinstance(name, str) or not name or "." in name:
                raise ValueError(f"input group name {name!r} must be a non-empty string without '.'")
            if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
                raise ValueError(f"input group '{name}' must have a positive integer width, got {width!r}")
        if output_dim <= 0:
            raise ValueError(f"NeRDModel output_dim must be positive, got {output_dim}")
        self.cfg = cfg or ModelConfig()
        self._input_groups = dict(input_groups)
        self._output_dim = int(output_dim)
        self.input_norms = nn.ModuleDict({name: RunningMeanStd(w) for name, w in input_groups.items()})
        self.target_norm = RunningMeanStd(output_dim)
        self.backbone = build_backbone(self.cfg, self.input_dim, self.output_dim)
        self.data_range: tuple[torch.Tensor, torch.Tensor] | None = None
        """(low, high), each (input_dim,): the smallest and largest raw value of every token column in the data
        the model was trained on (groups in token order), or None for a model saved before ranges were kept.
        Stored in checkpoints; the integrator reports the steps whose inputs leave it."""
        self.skip: nn.Linear | None = None
        if self.cfg.linear_skip:
            self.skip = nn.Linear(self.input_dim, self.output_dim)
            nn.init.zeros_(self.skip.weight)
            nn.init.zeros_(self.skip.bias)

    @property
    def input_groups(self) -> dict[str, int]:
        """Copy of the ordered group name -> width mapping."""
        return dict(self._input_groups)

    @property
    def input_dim(self) -> int:
        """Token width D: the sum of all group widths."""
        return sum(self._input_groups.values())

    @property
    def output_dim(self) -> int:
        """Prediction width P."""
        return self._output_dim

    @property
    def max_history(self) -> int:
        """Number of most recent steps that can influence a prediction (from the backbone)."""
        return int(self.backbone.max_history)

    def _checked(self, inputs: Mapping[str, torch.Tensor], sequence: bool) -> list[torch.Tensor]:
        """Return the groups in order, raising a ValueError naming any missing or mis-shaped one.

        With ``sequence`` every group must be ``(B, T, width)`` with the same ``B`` and ``T``;
        otherwise any leading shape ``(..., width)`` is accepted. Extra keys are ignored so a dataset
        batch holding targets and other fields can be passed as is.
        """
        tensors = []
        leading = None
        for name, width in self._input_groups.items():
            if name not in inputs:
                raise ValueError(
                    f"input group '{name}' (width {width}) is missing; got groups {sorted(inputs)}"
                )
            x = inputs[name]
            expected = f"(B, T, {width})" if sequence else f"(..., {width})"
            if x.ndim == 0 or x.shape[-1] != width or (sequence and x.ndim != 3):
                raise ValueError(f"input group '{name}' must have shape {expected}, got {tuple(x.shape)}")
            if sequence:
                if x.shape[1] == 0:
                    raise ValueError(
                        f"input group '{name}' has an empty history (T = 0); pass at least one step"
                    )
                if leading is None:
                    leading = x.shape[:2]
                elif x.shape[:2] != leading:
                    raise ValueError(
                        f"input group '{name}' has batch/time shape {tuple(x.shape[:2])}, "
                        f"but earlier groups have {tuple(leading)}"
                    )
            tensors.append(x)
        return tensors

    def with_input_groups(self, input_groups: Mapping[str, int]) -> NeRDModel:
        """A copy of this model that reads more input groups, with the same predictions until it is trained.

        Every group of this model must be among ``input_groups`` with its width. The first layer's weights on the
        new groups' token columns (the backbone's token embedding, the linear skip) start at zero, and the new
        groups' statistics are the identity until :meth:`update_statistics` or their own ``update``.

        Raises:
            ValueError: If a group of this model is missing from ``input_groups`` or has another width.
        """
        lost = [f"{k} ({w})" for k, w in self._input_groups.items() if input_groups.get(k) != w]
        if lost:
            raise ValueError(f"with_input_groups must keep every input group with its width; lost {', '.join(lost)}")
        wider = NeRDModel(input_groups, self.output_dim, self.cfg).to(self.target_norm.mean.device)
        offsets, start = {}, 0
        for name, width in wider._input_groups.items():
            offsets[name], start = start, start + width
        columns = torch.cat([torch.arange(offsets[k], offsets[k] + w) for k, w in self._input_groups.items()])
        state = wider.state_dict()
        for key, value in self.state_dict().items():
            if state[key].shape == value.shape:
                state[key] = value.clone()
            else:  # a layer reading the token: its old columns move to where their groups now sit
                widened = torch.zeros_like(state[key])
                widened[:, columns] = value
                state[key] = widened
        wider.load_state_dict(state)
        return wider

    def update_statistics(self, inputs: Mapping[str, torch.Tensor], target: torch.Tensor) -> None:
        """Merge a batch of training data into the normalisation statistics.

        Call this over the training set before training; the statistics are then kept fixed. A model configured
        without input (output) normalisation keeps the identity statistics for its inputs (target).

        Args:
            inputs: Group name -> raw values of shape ``(..., width)``.
            target: Raw targets of shape ``(..., P)``.
        """
        if target.ndim == 0 or target.shape[-1] != self.output_dim:
            raise ValueError(f"target must have shape (..., {self.output_dim}), got {tuple(target.shape)}")
        # Without normalisation (ablation options) the statistics stay the identity, so that training, checkpoints
        # and the integrator's per-token normalisation run one code path either way.
        for name, x in zip(self._input_groups, self._checked(inputs, sequence=False), strict=True):
            if self.cfg.normalize_inputs:
                self.input_norms[name].update(x)
        if self.cfg.normalize_outputs:
            self.target_norm.update(target)

    def forward(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Predict the normalised target at every time step.

        Args:
            inputs: Group name -> raw values of shape ``(B, T, width)``.

        Returns:
            Normalised predictions, shape ``(B, T, P)``; position t depends on steps 0..t only.
        """
        return self._forward(self._checked(inputs, sequence=True))

    def _forward(self, groups: list[torch.Tensor]) -> torch.Tensor:
        """:meth:`forward` on groups already checked and in order."""
        normalized = [self.input_norms[name].normalize(x) for name, x in zip(self._input_groups, groups, strict=True)]
        tokens = torch.cat(normalized, dim=-1)
        out = self.backbone(tokens)
        return out if self.skip is None else out + self.skip(tokens)

    def loss(self, inputs: Mapping[str, torch.Tensor], target: torch.Tensor, weights: torch.Tensor | None = None
             ) -> torch.Tensor:
        """Mean squared error in normalised units over every position of the window (teacher forcing).

        Args:
            inputs: Group name -> raw values of shape ``(B, T, width)``.
            target: Raw targets of shape ``(B, T, P)``: the state change from step t to t + 1.
            weights: Optional loss weight of each window ``(B,)``: the mean of the windows' errors times their
                weights (weighted datasets scale theirs to a mean of 1); None: every window alike.

        Returns:
            Scalar loss.
        """
        prediction = self(inputs)
        if target.shape != prediction.shape:
            raise ValueError(
                f"target must have shape {tuple(prediction.shape)} (B, T, P), got {tuple(target.shape)}"
            )
        if weights is None:
            return F.mse_loss(prediction, self.target_norm.normalize(target))
        if weights.shape != target.shape[:1]:
            raise ValueError(f"weights must have shape ({target.shape[0]},) (B,), got {tuple(weights.shape)}")
        errors = F.mse_loss(prediction, self.target_norm.normalize(target), reduction="none").mean(dim=(1, 2))
        return (errors * weights).mean()

    def predict(self, inputs: Mapping[str, torch.Tensor], lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Predict the raw target for the last valid time step of each history.

        Without ``lengths`` every row's history ends at the last position, and only the last
        :attr:`max_history` steps are fed to the backbone (one step for the MLP baseline, ``block_size`` for
        the transformer). With ``lengths`` the histories are left-aligned: row b holds ``lengths[b]`` valid
        steps at positions ``0 .. lengths[b] - 1`` (later positions are ignored, the backbone being causal), so
        rows with histories of different lengths share one forward pass. Gradient tracking and train/eval mode
        are left to the caller; wrap in ``torch.no_grad()`` for inference.

        Args:
            inputs: Group name -> raw values of shape ``(B, T, width)``, oldest step first.
            lengths: ``(B,)`` valid steps per row (1 .. min(T, max_history)), or None.

        Returns:
            De-normalised prediction at each row's last valid step, shape ``(B, P)``.
        """
        groups = self._checked(inputs, sequence=True)
        if lengths is None:
            keep = min(groups[0].shape[1], self.max_history)
            cropped = {name: x[:, -keep:] for name, x in zip(self._input_groups, groups, strict=True)}
            return self.target_norm.denormalize(self(cropped)[:, -1])
        longest = int(lengths.max())
        if int(lengths.min()) < 1 or longest > min(groups[0].shape[1], self.max_history):
            raise ValueError(f"lengths must lie in [1, {min(groups[0].shape[1], self.max_history)}], "
                             f"got [{int(lengths.min())}, {longest}]")
        prefix = {name: x[:, :longest] for name, x in zip(self._input_groups, groups, strict=True)}
        rows = torch.arange(len(lengths), device=lengths.device)
        return self.target_norm.denormalize(self(prefix)[rows, lengths - 1])

    def token_statistics(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, std)``, each ``(D,)`` float32: the per-group input statistics laid out along one token.

        ``(token - mean) / std`` of a raw token (the groups concatenated in order) equals :meth:`forward`'s own
        normalisation, element for element; a caller that normalises once per step (the integrator) uses this.
        """
        mean = torch.cat([norm.mean for norm in self.input_norms.values()]).float()
        std = torch.cat([torch.sqrt(norm.var + norm.eps) for norm in self.input_norms.values()]).float()
        return mean, std

    def predict_last(self, tokens: torch.Tensor, last: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
        """De-normalised prediction at one position per row, from already normalised tokens.

        The per-step path of the integrator: no validation and no host synchronisation. A backbone with
        ``forward_last`` (the transformer) computes only what that position needs; the others run on every
        position and the rows' positions are gathered.

        Args:
            tokens: ``(B, T, D)`` normalised tokens (see :meth:`token_statistics`), ``T <= max_history``.
            last: ``(B,)`` position of each row's prediction, in ``0 .. T - 1``; the causal backbone makes it
                depend on positions ``0 .. last[b]`` only.
            chunk: Run the network on at most this many rows at a time (None: all at once). Rows are
                independent, so the result is the same; on a CPU, chunks whose activations stay in cache are
                faster (docs/notebook/results.md).

        Returns:
            ``(B, P)`` raw targets.
        """
        return self.target_norm.denormalize(self.normalized_last(tokens, last, chunk))

    def normalized_last(self, tokens: torch.Tensor, last: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
        """:meth:`predict_last` before de-normalisation: the network's ``(B, P)`` output."""
        if chunk is not None and tokens.shape[0] > chunk:
            return torch.cat([self.normalized_last(tokens[i : i + chunk], last[i : i + chunk])
                              for i in range(0, tokens.shape[0], chunk)])
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        forward_last = getattr(self.backbone, "forward_last", None)
        out = forward_last(tokens, last) if forward_last is not None else self.backbone(tokens)[rows, last]
        if self.skip is not None:
            out = out + self.skip(tokens[rows, last])
        return out


def model_bytes(input_groups: Mapping[str, int], output_dim: int, cfg: ModelConfig) -> tuple[int, int]:
    """(parameters, bytes of parameters and buffers) of the model ``cfg`` describes, counted on torch's meta device,
    so that a model too large for memory is measured without allocating it."""
    with torch.device("meta"):
        model = NeRDModel(input_groups, output_dim, cfg)
    tensors = [*model.parameters(), *model.buffers()]
    return sum(p.numel() for p in model.parameters()), sum(t.numel() * t.element_size() for t in tensors)
