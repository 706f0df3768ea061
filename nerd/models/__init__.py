"""Sequence backbones for NeRD and the registry that builds one from a config.

Every backbone maps tokens ``(B, T, D)`` to predictions ``(B, T, P)`` causally (position t sees steps
0..t only) and exposes ``max_history``, the number of most recent steps that can influence the last
prediction. The backbone is chosen by ``ModelConfig.type``; each type reads its own sub-config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from torch import nn

from nerd.errors import UserError
from nerd.models.mlp import MLPConfig, MLPModel
from nerd.models.rnn import RNNConfig, RNNModel
from nerd.models.transformer import TransformerConfig, TransformerModel

MODEL_TYPES: dict[str, tuple[type, type[nn.Module]]] = {
    "transformer": (TransformerConfig, TransformerModel),
    "mlp": (MLPConfig, MLPModel),
    "gru": (RNNConfig, RNNModel),
    "lstm": (RNNConfig, RNNModel),
}
"""Model type name -> (config class, model class)."""


@dataclass
class ModelConfig:
    """Which backbone to use and the options of each kind (only the chosen kind's are read)."""

    type: str = "transformer"
    """Backbone type: one of ``transformer``, ``mlp``, ``gru``, ``lstm``."""
    transformer: TransformerConfig = field(default_factory=TransformerConfig)
    """Options used when ``type`` is ``transformer``."""
    mlp: MLPConfig = field(default_factory=MLPConfig)
    """Options used when ``type`` is ``mlp``."""
    rnn: RNNConfig = field(default_factory=RNNConfig)
    """Options used when ``type`` is ``gru`` or ``lstm`` (the type is the cell: one knob, no ``rnn.cell``)."""
    linear_skip: bool = False
    """Add a linear map from each (normalised) token to its prediction, beside the backbone (zero at start).
    Much of one frame's state change is linear in the current state (``Δq ≈ dt·q̇``); a linear path learns
    that part exactly and fast, leaving the backbone the nonlinear rest. Not in the paper: an option of ours."""
    # The ablation study's options (paper, appendix "Ablation Study"); the defaults are NeRD. They are recorded in
    # every checkpoint (here and in its robot signature) and honoured by training and inference alike.
    input_frame: Literal["robot", "world"] = "robot"
    """Frame of the state and contact inputs and of the target: ``robot`` NeRD's robot-centric frame, ``world`` the
    world frame (no gravity-direction input: it would be constant). A robot kept in the world frame (Cartpole) is
    unchanged by it."""
    contact_inputs: bool = True
    """Feed the contact quantities (normals, points, depths); false with ``input_frame: world`` is the paper's
    end-to-end baseline (E2E): state and torques in, relative next state out."""
    prediction: Literal["relative", "absolute"] = "relative"
    """Predict the state change (``relative``, NeRD) or the next state itself (``absolute``), in the inputs' frame."""
    normalize_inputs: bool = True
    """Normalise every input group with its training-set statistics; false feeds raw values."""
    normalize_outputs: bool = True
    """Train on normalised targets (and de-normalise predictions); false regresses raw targets."""


def build_backbone(cfg: ModelConfig, input_dim: int, output_dim: int) -> nn.Module:
    """Build the backbone named by ``cfg.type``.

    Args:
        cfg: Model configuration.
        input_dim: Token width D.
        output_dim: Prediction width P.

    Returns:
        A module with ``forward(x: (B, T, D)) -> (B, T, P)`` and an integer ``max_history``.

    Raises:
        ValueError: If ``cfg.type`` is not a registered type.
    """
    if cfg.type not in MODEL_TYPES:
        raise UserError(f"Unknown model type '{cfg.type}'. Valid model types are: {sorted(MODEL_TYPES)}")
    config_cls, model_cls = MODEL_TYPES[cfg.type]
    # The sub-config is the ModelConfig field of the type's config class, so a new backbone needs only
    # a registry entry and a field.
    sub_cfg = next(
        getattr(cfg, f.name) for f in dataclasses.fields(cfg) if isinstance(getattr(cfg, f.name), config_cls)
    )
    if model_cls is RNNModel:
        return RNNModel(input_dim, output_dim, sub_cfg, cell=cfg.type)
    return model_cls(input_dim, output_dim, sub_cfg)


__all__ = [
    "MODEL_TYPES",
    "MLPConfig",
    "MLPModel",
    "ModelConfig",
    "RNNConfig",
    "RNNModel",
    "TransformerConfig",
    "TransformerModel",
    "build_backbone",
]
