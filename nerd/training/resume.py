"""Where a run starts: a fresh model, a resumed run (``--resume``) or a fine-tune (``--init-from``), with what a
run's ``nn/last.pt`` records so that it can be continued, the checks that keep a resume from changing what its
checkpoint holds, and the running weight average."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel

from nerd.checkpoint import load_checkpoint, read_checkpoint
from nerd.config import ConfigError, differences, to_dict
from nerd.datasets.windows import TrajectoryWindows, dataset_files
from nerd.errors import UserError
from nerd.features import RobotSignature, robot_joint_limits
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel, model_bytes
from nerd.resources import check_memory
from nerd.training.config import MODEL_SIZE_SECTION, TrainConfig


@dataclass
class ResumeState:
    """What a run's ``nn/last.pt`` records (its ``extra``) so that ``--resume`` continues it where it stopped; the
    defaults for a new run (and for what checkpoints written before a field existed lack)."""

    step_seconds: float = 0.0
    """Seconds of the time budget spent (by ``time_budget_clock``)."""
    optimizer_steps: int | None = None
    """Optimiser steps taken (an epoch cut short by its budget has fewer than a whole one); None in checkpoints
    from before it was recorded, which then count whole epochs."""
    history: list[dict[str, float]] = field(default_factory=list)
    """The per-epoch records so far, so that a resumed run's summary and curve keep the epochs before it."""
    seed: int | None = None
    """The run's seed (None in checkpoints from before it was recorded)."""
    world_size: int | None = None
    """The number of processes the run trained on."""
    averaged: dict[str, Any] | None = None
    """The running weight average's state (``average_weights_from``), or None."""
    train_seconds: float = 0.0
    """Wall-clock seconds of the run so far, so that a resumed run's summary counts the whole run."""

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None) -> ResumeState:
        """The state a checkpoint's ``extra`` recorded (empty: a new run's)."""
        extra = extra or {}
        return cls(step_seconds=float(extra.get("step_seconds", 0.0)), optimizer_steps=extra.get("optimizer_steps"),
                   history=list(extra.get("history", [])), seed=extra.get("seed"),
                   world_size=extra.get("world_size"), averaged=extra.get("averaged"),
                   train_seconds=float(extra.get("train_seconds", 0.0)))

    def to_extra(self) -> dict[str, Any]:
        """The checkpoint's ``extra`` (``averaged`` only where a weight average is kept)."""
        extra = {"step_seconds": self.step_seconds, "optimizer_steps": self.optimizer_steps,
                 "history": self.history, "seed": self.seed, "world_size": self.world_size}
        if self.averaged is not None:
            extra["averaged"] = self.averaged
        extra["train_seconds"] = self.train_seconds
        return extra


@dataclass
class RunStart:
    """What a run starts from: its model and optimiser, where it resumes, and what its last checkpoint recorded."""

    model: NeRDModel
    """The model, in train mode."""
    optimizer: torch.optim.Optimizer
    """Its Adam optimiser (a resumed run's state restored)."""
    epoch: int = 0
    """The first epoch to run."""
    best_score: float = math.inf
    """The score of the best checkpoint so far (inf: none)."""
    previous: ResumeState = field(default_factory=ResumeState)
    """What the resumed run's ``nn/last.pt`` recorded; the defaults for a new run."""
    averaged: AveragedModel | None = None
    """The running weight average (``average_weights_from``, rank 0), or None."""


def joint_limits(cfg: TrainConfig, checkpoint: str | Path | None) -> tuple[tuple[int, float, float], ...]:
    """The joint limits a ``joint_limit_inputs`` run reads: its robot's, or, where the engine that declares them is
    not installed (a GPU machine with torch alone), those of the ``checkpoint`` that the run continues."""
    if not cfg.joint_limit_inputs:
        return ()
    try:
        return robot_joint_limits(cfg.env_name)
    except ImportError as err:
        # A checkpoint whose limits differ from the robot's is refused wherever the engine is there; here its own
        # are the only ones at hand, and the signature check against the datasets still applies.
        payload = read_checkpoint(checkpoint) if checkpoint is not None and Path(checkpoint).is_file() else {}
        limits = RobotSignature.from_dict(payload["signature"]).joint_limits if payload else ()
        if not limits:
            raise UserError(f"joint_limit_inputs: {cfg.env_name}'s joint limits come from its environment, which "
                            f"needs {err.name or 'the engine'} (not installed here), or from a checkpoint that "
                            "reads them (--init-from, --resume)") from err
        return limits


def init_or_resume(cfg: TrainConfig, train_data: TrajectoryWindows, logdir: Path, device: str, resume: bool,
                   init_from: str | Path | None) -> RunStart:
    """A fresh model (statistics of the training set), a resumed run or one initialised from a checkpoint, with its
    optimiser, first epoch, best score so far and what the resumed run's last checkpoint recorded (all but the
    weight average, see :func:`weight_average`)."""
    sig = train_data.signature
    start_epoch, optimizer_state, best_score, previous = 0, None, math.inf, ResumeState()
    if resume:
        last = logdir / "nn" / "last.pt"
        if not last.is_file():
            raise FileNotFoundError(f"nothing to resume: {last} does not exist (start the run without --resume)")
        model, ckpt_sig, payload = load_checkpoint(last, device)
        check_resume_config(cfg, model.cfg, payload)  # first: a changed config key says more than the layout
        changes = resume_changes(cfg, payload)
        if changes:
            print(f"resuming with changed settings: {changes}", flush=True)
        ckpt_sig.check_compatible(sig, what="checkpoint")
        start_epoch, optimizer_state = payload["epoch"] + 1, payload["optimizer_state"]
        previous = ResumeState.from_extra(payload.get("extra"))
        best_score = previous_best(logdir / "nn" / "best.pt", cfg.best_checkpoint_by)
    elif init_from is not None:
        model, ckpt_sig, _ = load_checkpoint(init_from, device)
        check_init_from(cfg, init_from, (model.cfg, ckpt_sig))  # first: a config key says more than the layout
        # What the checkpoint already reads stays its own, so one for other limits or another frame is still
        # refused below; what it lacks of the config's joint-limit groups it gains.
        gained = replace(ckpt_sig, joint_limits=ckpt_sig.joint_limits or sig.joint_limits,
                         joint_limit_lookahead=ckpt_sig.joint_limit_lookahead or sig.joint_limit_lookahead)
        new_groups = [g for g in gained.input_groups if g not in ckpt_sig.input_groups]
        if new_groups:
            # The new groups start with zero weights, so the model starts from the checkpoint's predictions; their
            # statistics come from the training set like a fresh model's.
            ckpt_sig = gained
            model = model.with_input_groups(ckpt_sig.input_groups)
            for group in new_groups:
                if model.cfg.normalize_inputs:
                    model.input_norms[group].update(train_data.inputs[group].flatten(0, 1))
        ckpt_sig.check_compatible(sig, what="checkpoint")
    else:
        # Weights, gradients and Adam's two moments: a size the allocator would refuse with a traceback is one line.
        parameters, size = model_bytes(sig.input_groups, sig.target_dim, cfg.model)
        section = f"model.{MODEL_SIZE_SECTION.get(cfg.model.type, cfg.model.type)}"
        check_memory(4 * size, f"a model of {parameters:,} parameters (weights, gradients, Adam's moments)", device,
                     f"lower the model's sizes (config section '{section}')")
        model = NeRDModel(sig.input_groups, sig.target_dim, cfg.model).to(device)
        # Statistics of every step of the training set, computed once.
        inputs = {k: v.flatten(0, 1) for k, v in train_data.inputs.items()}
        model.update_statistics(inputs, train_data.targets.flatten(0, 1))
    # The range of the data the model has seen (a fine-tune's: its start's and the new data's), for the integrator's
    # report of rollouts that leave it. A resumed run keeps its checkpoint's.
    low, high = train_data.input_range(list(model.input_groups))
    previous_range = model.data_range if (resume or init_from is not None) else None
    if previous_range is not None and previous_range[0].shape == low.shape:
        low, high = (torch.minimum(low, previous_range[0]), torch.maximum(high, previous_range[1]))
    model.data_range = (low, high)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr_start)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    return RunStart(model, optimizer, start_epoch, best_score, previous)


def check_init_from(cfg: TrainConfig, checkpoint: str | Path,
                    loaded: tuple[ModelConfig, RobotSignature] | None = None) -> None:
    """Raise a one-line error if a fine-tune of ``checkpoint`` with ``cfg`` (``--init-from``) cannot run: another
    robot, another ``model`` section, or joint-limit inputs the checkpoint reads and the config leaves out. Needs
    only the checkpoint (``loaded``: its model config and signature, if the caller has read them), so that a job
    which fine-tunes later (the transfer loop) can check it before it starts."""
    if loaded is None:
        model, sig, _ = load_checkpoint(checkpoint)
        loaded = (model.cfg, sig)
    model_cfg, sig = loaded
    if sig.env_name != cfg.env_name:
        raise UserError(f"--init-from {checkpoint} is a model of {sig.env_name}, but the config trains {cfg.env_name}")
    if to_dict(model_cfg) != to_dict(cfg.model):
        raise ConfigError(f"--init-from {checkpoint}: its model differs from the config's 'model' section "
                          f"({', '.join(differences(to_dict(model_cfg), to_dict(cfg.model), 'model'))}); "
                          "make the config's model section match the checkpoint's")
    for key, reads in (("joint_limit_inputs", bool(sig.joint_limits)),
                       ("joint_limit_lookahead", bool(sig.joint_limit_lookahead))):
        if reads and not getattr(cfg, key):
            raise ConfigError(f"config key '{key}': --init-from {checkpoint} reads that input group; set "
                              f"{key}: true")


def weight_average(cfg: TrainConfig, model: NeRDModel, previous: ResumeState, init_from: str | Path | None
                   ) -> AveragedModel | None:
    """The running mean of ``average_weights_from`` (None when off): a resumed run's own, else a new one, which a
    fine-tune averaging from 0 starts with the weights it starts from."""
    if cfg.average_weights_from is None:
        return None
    # A copy of the model, normalisation buffers included (fixed during training, so they are not averaged).
    averaged = AveragedModel(model)
    if previous.averaged is not None:
        averaged.load_state_dict(previous.averaged)
    elif init_from is not None and cfg.average_weights_from == 0:
        averaged.update_parameters(model)
    return averaged


def previous_best(path: Path, best_checkpoint_by: str) -> float:
    """Score of a resumed run's best checkpoint (inf without one, or one chosen by another criterion).

    Raises:
        UserError: If the file is damaged (the resumed run would otherwise replace it blindly, or crash later).
    """
    if not path.is_file():
        return float("inf")
    try:
        extra = read_checkpoint(path).get("extra", {})
    except UserError as err:
        raise UserError(f"{err}; move it away to resume without it") from err
    # Checkpoints written before the choice existed were selected by validation loss.
    if extra.get("best_checkpoint_by", "valid_loss") != best_checkpoint_by:
        return float("inf")
    return float(extra.get("best_score", extra.get("valid_loss", float("inf"))))


def check_resume_config(cfg: TrainConfig, model_cfg: ModelConfig, payload: dict[str, Any]) -> None:
    """Refuse to resume a run with a config that would change what its checkpoint holds.

    The model sizes, ``history_length`` and the training file stay those of the run (the weights, and the
    normalisation statistics of that file, come from the checkpoint); the schedule may change.

    Raises:
        ConfigError: Naming every key that differs and what to do instead.
    """
    changed = []
    if to_dict(model_cfg) != to_dict(cfg.model):
        changed.append(", ".join(differences(to_dict(model_cfg), to_dict(cfg.model), "model")))
    if payload["history_length"] != cfg.history_length:
        changed.append(f"history_length {payload['history_length']} -> {cfg.history_length}")
    for key in ("joint_limit_inputs", "joint_limit_lookahead"):
        old = bool(payload["config"].get(key, False))
        if old != getattr(cfg, key):
            changed.append(f"{key} {old} -> {getattr(cfg, key)}")
    old_train = payload["config"].get("dataset", {}).get("train", "")
    if [p.resolve() for p in dataset_files(old_train)] != [p.resolve() for p in dataset_files(cfg.dataset.train)]:
        changed.append(f"dataset.train {old_train} -> {cfg.dataset.train}")
    # The best checkpoint so far was scored by the old rule; a new rule cannot rank it against the coming epochs.
    old_rule = payload["config"].get("best_checkpoint_by", "rollout")
    if old_rule != cfg.best_checkpoint_by:
        changed.append(f"best_checkpoint_by {old_rule} -> {cfg.best_checkpoint_by}")
    if changed:
        raise ConfigError(f"cannot resume with a changed {'; '.join(changed)}: the run's checkpoint holds the "
                          "old one; resume with the run's config, or start a new run with --init-from")


def resume_changes(cfg: TrainConfig, payload: dict[str, Any]) -> str:
    """The schedule keys a resume changes against the run's recorded config (``key old -> new``, empty if none),
    so that a resumed run says what it does differently."""
    new = {key: value for key, value in to_dict(cfg).items() if key != "dataset"}
    # Keys the config no longer has (options since removed, recorded by older runs) are not changes.
    old = {key: value for key, value in payload["config"].items() if key in new}
    # The files are checked by check_resume_config; their loss weights are part of the schedule.
    weights = ("train_weights", "valid_weights")
    new["dataset"] = {key: getattr(cfg.dataset, key) for key in weights}
    old["dataset"] = {key: payload["config"].get("dataset", {}).get(key) for key in weights}
    return ", ".join(differences(old, new))
