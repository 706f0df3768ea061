"""A training run's configuration: the dataclasses a ``cfg/train`` YAML loads into, validated on load, and the names
of what a run writes in its directory."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from nerd.config import ConfigError, check_range
from nerd.features import MODEL_OPTIONS
from nerd.models import ModelConfig
from nerd.modes import INITIAL_STATES, InitialStates

RUN_DIR_ENTRIES = ("nn", "config.yaml", "git.yaml", "summary.yaml", "curve.csv", "curve.png")
"""What a training run writes in its directory besides TensorBoard events (what ``--overwrite`` removes)."""

MODEL_SIZE_SECTION = {"transformer": "transformer", "mlp": "mlp", "gru": "rnn", "lstm": "rnn"}
"""The config section that sizes each backbone type."""

RUN_CHECKPOINT = "nn/last.pt"
"""The file that makes a run resumable: a run that replaced another has started once it exists."""

ROLLOUT_DIVERGED = "rollout_diverged"
"""Metric recorded (as inf) for an epoch whose rollout check produced non-finite states."""


@dataclass
class DatasetConfig:
    """Where the training data is."""

    train: str | list[str] = ""
    """Training HDF5 file, a directory of parts (sharded generation) or a list of files read as one dataset
    (relative paths are relative to the working directory of the command)."""
    valid: str | list[str] = ""
    """Validation HDF5 file, directory or list of files."""
    max_train_trajectories: int | None = None
    """Use only the first trajectories of the training file; None for all."""
    train_weights: list[float] | None = None
    """A loss weight per entry of the ``train`` list (our option): a small part of the data (e.g. the ground-truth
    data of a policy, whose targets are millimetres) can count in the loss as much as a large one; scaled to a mean
    of 1 over the windows. None: every window alike (the release's loss)."""
    valid_weights: list[float] | None = None
    """The same per entry of the ``valid`` list, so that the validation loss (and ``best.pt`` by it) measures what
    the weighted training loss minimises."""

    def __post_init__(self) -> None:
        for key in ("train", "valid"):
            weights, entries = getattr(self, f"{key}_weights"), getattr(self, key)
            if weights is None:
                continue
            count = 1 if isinstance(entries, str) else len(entries)
            if len(weights) != count:
                raise ConfigError(f"config key '{key}_weights': {len(weights)} weights for the {count} "
                                  f"entries of dataset.{key}; give one per entry")
            if not all(math.isfinite(w) and w > 0 for w in weights):
                raise ConfigError(f"config key '{key}_weights': weights must be positive, got {weights}")


@dataclass
class RolloutEvalConfig:
    """The short passive rollout evaluated after every epoch."""

    num_envs: int = 64
    """Trajectories rolled out."""
    horizon: int = 100
    """Steps per trajectory."""
    seed: int = 100
    """Seed of the initial states. Not the evaluation's 500: with the same seed the first rollouts of a 2048-rollout
    evaluation start where these do, and selecting ``best.pt`` on them would peek at the test."""
    initial_states: InitialStates = INITIAL_STATES[0]
    """Where the rollouts start (:data:`~nerd.modes.INITIAL_STATES`): ``task``, the robot's reset (the release's
    passive protocol), or ``data``, the data sampler's wider ranges."""


@dataclass
class TrainConfig:
    """A NeRD training run."""

    RETIRED_KEYS: ClassVar[dict[str, Any]] = {"input_noise": 0.0, "unroll_steps": 1, "mirror_data": False}
    """Options removed after they measured as no help (docs/findings.md), with their no-op values: a run's recorded
    config that holds one at that value still loads (for ``--resume`` and the shipped models' configs); any other
    value is an error."""

    env_name: str
    """Robot the model is for; must match the datasets."""
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    """Training and validation data."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Backbone type and sizes."""
    history_length: int = 10
    """Window length H: tokens of history the model sees (at most the transformer's ``block_size``); stored in
    every checkpoint, and the integrator keeps that many tokens."""
    batch_size: int = 512
    """Windows per optimiser step."""
    num_epochs: int = 10
    """Passes over the training windows (or over ``batches_per_epoch`` batches)."""
    batches_per_epoch: int | None = None
    """Cap on optimiser steps per epoch; None for every window once."""
    valid_batches: int = 50
    """Validation batches per epoch."""
    lr_start: float = 1.0e-3
    """Learning rate at the first step."""
    lr_end: float = 1.0e-4
    """Learning rate at the last step (linear decay)."""
    lr_warmup: float = 0.0
    """Fraction of the run (of its time budget, or of its optimiser steps) over which the learning rate first rises
    linearly from 0 to ``lr_start``; the decay to ``lr_end`` takes the rest (our option; 0 = none, the release's
    schedule). A run continued from converged weights (``--init-from``) starts with a fresh Adam state whose first
    steps move every weight by about ``lr_start``: at 1e-4 that raised a converged Cartpole model's validation loss
    200x within six steps."""
    grad_clip: float = 1.0
    """Gradient-norm clip."""
    rollout_eval: RolloutEvalConfig = field(default_factory=RolloutEvalConfig)
    """Per-epoch passive rollout check."""
    time_budget_minutes: float | None = None
    """Stop once batch gathering and optimiser steps (evaluation excluded) have used this much CPU time of this
    process (summed over its threads, so other jobs on the machine do not eat into it; wall-clock time with
    ``time_budget_clock: wall``), at most ``num_epochs``
    epochs; the learning rate then decays over the budget instead of over the steps. For comparing recipes at
    equal compute; a run with a budget is not bit-reproducible. A resumed run continues the budget its epochs
    spent (recorded in ``nn/last.pt``). None trains for ``num_epochs``."""
    time_budget_clock: Literal["process", "wall"] = "process"
    """What ``time_budget_minutes`` counts: ``"process"`` this process's CPU time (the default, steady on a shared
    CPU), or ``"wall"`` wall-clock seconds of the same work, the one that means something on a GPU, where the CPU
    time is the host's waiting and launching, not the device's work."""
    micro_batch_size: int | None = None
    """Split each batch (each rank's share under torchrun) into micro-batches of at most this many windows whose
    gradients are accumulated before the one optimiser step: the same gradient up to float rounding, faster on a
    CPU where a micro-batch's activations stay in cache (our option; 128 windows made the Cartpole CPU config's
    step ~1.2x faster, docs/notebook/results.md). None: the whole batch at once (the release's way)."""
    average_weights_from: float | None = None
    """Weight averaging (our option; stochastic weight averaging, Izmailov et al. 2018): once this fraction of the
    run is done (of its time budget, or of its optimiser steps without one), keep an equal-weight mean of the
    weights at every epoch's end (``torch.optim.swa_utils.AveragedModel``). With 0, a run started from a
    checkpoint (``--init-from``) also counts the weights it starts from. Each epoch the mean is validated (and
    rollout-checked) beside the weights, written to ``nn/averaged.pt`` and competes for ``nn/best.pt``.
    None: off."""
    joint_limit_inputs: bool = False
    """Give the model the ``joint_limits`` input group (our option; :mod:`nerd.features`): each limited joint's
    penetration beyond its limit and its rate there, for robots that declare
    :attr:`~nerd.envs.Environment.joint_limits` (the Cartpole's rail stops). False: the release's inputs. A run
    started ``--init-from`` a model without the group gains it with zero weights, so it starts from that model's
    predictions."""
    joint_limit_lookahead: bool = False
    """With ``joint_limit_inputs``, also give the model the ``joint_limit_lookahead`` group (our option;
    :mod:`nerd.features`): the same penetration and rate one frame ahead, for ``q + q̇ Δt``, the cue of the frame
    that enters a limit. A run started ``--init-from`` a model without the group gains it with zero weights."""
    best_checkpoint_by: Literal["rollout", "valid_loss"] = "rollout"
    """What ``nn/best.pt`` minimises: ``"rollout"`` the sum of the per-epoch rollout's error metrics (what a NeRD
    model is for; the one-step loss can fall while the rollout error grows), or ``"valid_loss"`` the one-step
    validation loss."""

    def __post_init__(self) -> None:
        # Values that would run but mislead (an empty epoch, a negative clip) are refused when the config loads.
        for key in ("history_length", "batch_size", "num_epochs", "valid_batches"):
            check_range(key, getattr(self, key), low=1)
        check_range("batches_per_epoch", self.batches_per_epoch, low=1)
        check_range("micro_batch_size", self.micro_batch_size, low=1, high=self.batch_size)
        if self.joint_limit_lookahead and not self.joint_limit_inputs:
            raise ConfigError("config key 'joint_limit_lookahead': needs joint_limit_inputs: true (it looks ahead "
                              "at the same limits)")
        check_range("dataset.max_train_trajectories", self.dataset.max_train_trajectories, low=1)
        check_range("grad_clip", self.grad_clip, low=0, low_open=True)
        check_range("lr_start", self.lr_start, low=0, low_open=True)
        check_range("lr_end", self.lr_end, low=0)
        if not 0.0 <= self.lr_warmup < 1.0:
            raise ConfigError(f"config key 'lr_warmup': must be >= 0 and < 1, got {self.lr_warmup!r}")
        check_range("average_weights_from", self.average_weights_from, low=0, high=1)
        check_range("time_budget_minutes", self.time_budget_minutes, low=0, low_open=True)
        check_range("rollout_eval.num_envs", self.rollout_eval.num_envs, low=0)
        check_range("rollout_eval.horizon", self.rollout_eval.horizon, low=1)
        # Checked when the config loads, not clamped later: a history the model cannot see is a config error.
        block_size = self.model.transformer.block_size
        if self.model.type == "transformer" and self.history_length > block_size:
            raise ConfigError(f"config key 'history_length': {self.history_length} exceeds "
                              f"model.transformer.block_size {block_size}, the transformer's context; "
                              "shorten the history or enlarge block_size")


def model_options(model_cfg: ModelConfig) -> dict[str, Any]:
    """The model options of ``model_cfg`` that shape its inputs and target (:data:`~nerd.features.MODEL_OPTIONS`),
    as the dataset windows and the robot signature take them."""
    return {key: getattr(model_cfg, key) for key in MODEL_OPTIONS}
