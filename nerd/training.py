"""Training a NeRD model: one explicit loop over dataset windows.

batch -> normalised MSE over every causal position -> backward -> clip -> Adam step, with a linear learning-
rate decay; after every epoch a validation loss, a short passive rollout against the ground truth, TensorBoard
scalars and checkpoints (``nn/last.pt``, and ``nn/best.pt`` by rollout error or validation loss) in the run directory.
"""

from __future__ import annotations

import copy
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
import yaml
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from nerd.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from nerd.config import ConfigError, check_range, to_dict
from nerd.datasets.windows import TrajectoryWindows, dataset_files
from nerd.distributed import Rank, current_rank, replica_checksums
from nerd.errors import RolloutDivergedError, UserError, first_line
from nerd.features import MODEL_OPTIONS, RobotSignature, robot_joint_limits
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel, model_bytes
from nerd.modes import INITIAL_STATES, NEURAL, InitialStates
from nerd.resources import check_memory
from nerd.run_dir import (
    ExclusiveLock,
    check_run_dir,
    new_run_dir,
    recover_previous_run,
    write_run_record,
    write_text_atomic,
)

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
    """Mean normalised loss over ``batches`` random validation batches (the same ones every epoch)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    losses = [model.loss(x, y).item() for x, y in data.iterate(batch_size, generator, batches)]
    model.train()
    return sum(losses) / max(len(losses), 1)


def train(cfg: TrainConfig, logdir: str | Path, device: str = "cpu", seed: int | None = None, *,
          resume: bool = False, init_from: str | Path | None = None, overwrite: bool = False,
          progress: bool = True) -> dict[str, Any]:
    """Train a NeRD model in the run directory ``logdir``; returns a summary (best score, checkpoint paths, time).

    Args:
        seed: Initial weights, batch orders and validation batches. None: 0 for a new run, the run's own for a
            resumed one (recorded in ``nn/last.pt``); a resume with another seed is refused, since it would see
            other batch orders than the run it continues.
        resume: Continue the run in ``logdir`` from its ``nn/last.pt`` (weights, optimiser, next epoch, best
            checkpoint so far). ``cfg`` may change the schedule (epochs, learning rate, batches) but not the
            robot, model, ``history_length`` or training file (see :func:`check_resume_config`).
        init_from: Start a new run from this checkpoint's weights and normalisation statistics, with a fresh
            optimiser from epoch 0 (fine-tuning, typically on a new dataset); the model config must match it.
        overwrite: Replace a previous run in ``logdir``; it is set aside only once every input has been
            validated and restored if the new run fails before its first checkpoint (:func:`new_run_dir`).
    """
    if resume and init_from is not None:
        raise UserError("resume continues the run in the log directory, init_from starts a new one: pick one")
    rank = current_rank()
    if cfg.batch_size % rank.world_size:
        raise UserError(f"batch_size {cfg.batch_size} must be divisible by the number of processes "
                        f"{rank.world_size}: each rank takes an equal share of every batch")
    torch.manual_seed(seed or 0)  # the same on every rank: identical initial weights (DDP also broadcasts rank 0's)
    logdir = Path(logdir)
    if not rank.is_main:
        return _train(cfg, logdir, device, seed, resume, init_from, overwrite, progress, rank)
    # One run per directory: a second process would score the first one's checkpoints as its own. The lock sits
    # beside the directory, so that a failed start leaves no directory behind.
    logdir.parent.mkdir(parents=True, exist_ok=True)
    lock = ExclusiveLock(logdir.parent / f".{logdir.name}.lock",
                         f"another process is training in {logdir}; wait for it or choose another --logdir")
    try:
        # A run set aside by an --overwrite that was killed before the new run's first checkpoint comes back.
        recover_previous_run(logdir, RUN_DIR_ENTRIES, RUN_CHECKPOINT)
        return _train(cfg, logdir, device, seed, resume, init_from, overwrite, progress, rank)
    finally:
        lock.release()


def _train(cfg: TrainConfig, logdir: Path, device: str, seed: int | None, resume: bool,
           init_from: str | Path | None, overwrite: bool, progress: bool, rank: Rank) -> dict[str, Any]:
    if not resume and rank.is_main:
        check_run_dir(logdir, RUN_DIR_ENTRIES, overwrite)  # fail fast, before the datasets are read
    limits = _joint_limits(cfg, logdir / "nn" / "last.pt" if resume else init_from)
    options = model_options(cfg.model)
    train_data = TrajectoryWindows(cfg.dataset.train, cfg.history_length, device, cfg.dataset.max_train_trajectories,
                                   joint_limits=limits, joint_limit_lookahead=cfg.joint_limit_lookahead,
                                   model_options=options)
    valid_data = TrajectoryWindows(cfg.dataset.valid, cfg.history_length, device, joint_limits=limits,
                                   joint_limit_lookahead=cfg.joint_limit_lookahead, model_options=options)
    sig = train_data.signature
    for name, data in (("training", train_data), ("validation", valid_data)):
        if data.signature.env_name != cfg.env_name:
            raise UserError(
                f"the {name} dataset is for {data.signature.env_name}, but the config trains {cfg.env_name}")
    valid_data.signature.check_compatible(sig, what="validation dataset")
    if cfg.batch_size > len(train_data):
        raise ConfigError(f"config key 'batch_size': {cfg.batch_size} exceeds the {len(train_data):,} windows of "
                          "the training data; lower it or train on more data")
    from nerd.envs import env_class  # the engine, imported only when a run starts (the module stays engine-free)

    robot_dt = env_class(cfg.env_name).frame_dt
    for name, data in (("training", train_data), ("validation", valid_data)):
        if not math.isclose(data.frame_dt, robot_dt, rel_tol=1e-9):
            raise UserError(f"the {name} dataset's frames are {data.frame_dt:g} s, but {cfg.env_name} steps "
                            f"{robot_dt:g} s per frame; regenerate it with generate_dataset.py")
    if cfg.best_checkpoint_by == "rollout" and cfg.rollout_eval.num_envs < 1:
        raise UserError("best_checkpoint_by: rollout needs rollout_eval.num_envs > 0; set it or use valid_loss")
    model, optimizer, start_epoch, best_score, previous = _init_or_resume(cfg, train_data, logdir, device, resume,
                                                                          init_from)
    recorded = previous.get("seed")  # runs resumed from checkpoints written before the seed was recorded: None
    if seed is not None and recorded is not None and seed != recorded:
        raise UserError(f"the run in {logdir} was trained with seed {recorded}; resuming it with seed {seed} would "
                        f"change its batch orders (leave the seed out to continue with the run's own)")
    seed = seed if seed is not None else (recorded or 0)
    ranks = previous.get("world_size")
    if ranks is not None and ranks != rank.world_size and rank.is_main:
        # Each rank draws its own share of every batch, so the batch orders differ from the run's from here on.
        print(f"resuming a run trained on {ranks} process(es) on {rank.world_size}: the batch size stays "
              f"{cfg.batch_size}, split over {rank.world_size}; the batch orders differ from here on", flush=True)

    # Rank 0 alone writes the run directory; the other ranks only train.
    run_dir = (nullcontext(logdir) if resume or not rank.is_main
               else new_run_dir(logdir, RUN_DIR_ENTRIES, overwrite, RUN_CHECKPOINT))
    averaged = _weight_average(cfg, model, previous, init_from) if rank.is_main else None
    with run_dir:
        return _train_loop(cfg, logdir, model, optimizer, start_epoch, best_score, train_data, valid_data, device,
                           seed, progress, previous, averaged)


def _train_loop(cfg: TrainConfig, logdir: Path, model: NeRDModel, optimizer: torch.optim.Optimizer, start_epoch: int,
                best_score: float, train_data: TrajectoryWindows, valid_data: TrajectoryWindows, device: str,
                seed: int, progress: bool, previous: dict[str, Any] | None = None,
                averaged: AveragedModel | None = None) -> dict[str, Any]:
    """The epochs of :func:`train`, once every input is validated, in the prepared run directory.

    ``averaged`` (rank 0 only, ``average_weights_from``) takes the weights at each epoch's end once the run is far
    enough along; it is validated, rollout-checked and saved as ``nn/averaged.pt``, and competes for ``best.pt``.

    Under torchrun every rank runs this loop on its own shard of each batch, with gradients averaged by
    DistributedDataParallel; rank 0 alone validates, evaluates and writes (the others return an empty summary).
    """
    from torch.utils.tensorboard import SummaryWriter

    rank = current_rank()
    rollout_units: dict[str, str] = {}  # unit of each rollout-check metric, filled by _evaluate_epoch
    sig = train_data.signature
    config_dict = to_dict(cfg)
    if rank.is_main:
        write_run_record(logdir, config_dict)
    loss_fn = model.loss
    if rank.world_size > 1:
        device_ids = [torch.device(device).index] if torch.device(device).type == "cuda" else None
        loss_fn = torch.nn.parallel.DistributedDataParallel(_ModelLoss(model), device_ids=device_ids)
    batches = len(range(0, len(train_data), cfg.batch_size))
    steps_per_epoch = min(batches, cfg.batches_per_epoch or batches)
    if cfg.batches_per_epoch is not None and cfg.batches_per_epoch > batches and rank.is_main:
        # An epoch is one pass over the windows at most; say so rather than run fewer batches silently.
        print(f"batches_per_epoch {cfg.batches_per_epoch} exceeds the {batches} batches of one pass over the "
              f"{len(train_data):,} training windows; each epoch runs {batches}", flush=True)
    best_path, last_path = logdir / "nn" / "best.pt", logdir / "nn" / "last.pt"
    averaged_path = logdir / "nn" / "averaged.pt"
    previous = previous or {}
    # A resumed run's summary and curve keep the epochs before the interruption.
    history: list[dict[str, float]] = list(previous.get("history", []))
    spent = float(previous.get("step_seconds", 0.0))
    # Wall-clock seconds of the run before it was interrupted, so that a resumed run's summary counts the whole run.
    earlier_seconds = float(previous.get("train_seconds", 0.0))
    started = time.perf_counter()
    # A resumed run continues its budget (and the learning rate that decays over it) where its last epoch ended.
    # The steps the interrupted run took (an epoch cut short by its budget has fewer than steps_per_epoch);
    # checkpoints from before this was recorded fall back to whole epochs.
    run = _Progress(step=int(previous.get("optimizer_steps", start_epoch * steps_per_epoch)),
                    budget=cfg.time_budget_minutes * 60.0 if cfg.time_budget_minutes else None, seconds=spent,
                    rank=rank)
    with SummaryWriter(str(logdir)) if rank.is_main else _NoWriter() as writer:
        writer.add_text("hyperparameters",
                        "|key|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config_dict.items()))
        for epoch in range(start_epoch, cfg.num_epochs):
            if run.budget_spent:
                break
            epoch_start = time.perf_counter()
            losses = _train_epoch(model, loss_fn, optimizer, cfg, train_data, epoch, steps_per_epoch, seed, run,
                                  writer, progress and rank.is_main)
            epoch_seconds = time.perf_counter() - epoch_start
            _check_replicas(model, run)
            if not rank.is_main:
                continue
            valid = validation_loss(model, valid_data, cfg.batch_size, cfg.valid_batches, seed + 1)
            # What --resume needs; ``history`` is the list itself, so last.pt, saved below, includes this epoch.
            resume_state = {"step_seconds": run.seconds, "optimizer_steps": run.step, "history": history,
                            "seed": seed, "world_size": rank.world_size}
            # The check steps a copy of the epoch's weights (evaluation puts its model in eval mode); no file
            # stands between them, so nothing another process writes can be checked in their place.
            ckpt_metrics = _evaluate_epoch(cfg, model, epoch, device, writer, sig.robot_variant, units=rollout_units)
            writer.add_scalar("losses/valid", valid, epoch)
            writer.add_scalar("perf/windows_per_second", len(losses) * cfg.batch_size / epoch_seconds, epoch)
            record = {"epoch": epoch, "windows_seen": run.step * cfg.batch_size, "step_seconds": run.seconds,
                      "train_loss": sum(losses) / max(len(losses), 1), "valid_loss": valid,
                      "epoch_seconds": epoch_seconds, **ckpt_metrics}
            candidates = [(_best_score(cfg, valid, ckpt_metrics), model, valid, ckpt_metrics, "trained")]
            if averaged is not None:
                fraction = run.seconds / run.budget if run.budget else run.step / (steps_per_epoch * cfg.num_epochs)
                if fraction >= cfg.average_weights_from:
                    averaged.update_parameters(model)
                resume_state["averaged"] = averaged.state_dict()
            if averaged is not None and int(averaged.n_averaged) > 0:
                mean = averaged.module
                mean_valid = validation_loss(mean, valid_data, cfg.batch_size, cfg.valid_batches, seed + 1)
                save_checkpoint(averaged_path, mean, sig, config_dict, history_length=cfg.history_length,
                                epoch=epoch, extra={"valid_loss": mean_valid,
                                                    "weights_averaged": int(averaged.n_averaged)})
                mean_metrics = _evaluate_epoch(cfg, mean, epoch, device, writer, sig.robot_variant,
                                               tag="eval_averaged")
                writer.add_scalar("losses/valid_averaged", mean_valid, epoch)
                record.update({"averaged_valid_loss": mean_valid,
                               **{f"averaged_{name}": value for name, value in mean_metrics.items()}})
                candidates.append((_best_score(cfg, mean_valid, mean_metrics), mean, mean_valid, mean_metrics,
                                   "averaged"))
            history.append(record)
            score, chosen, chosen_valid, chosen_metrics, weights = min(candidates, key=lambda c: c[0])
            if score < best_score:
                best_score = score
                save_checkpoint(best_path, chosen, sig, config_dict, history_length=cfg.history_length, epoch=epoch,
                                extra={"valid_loss": chosen_valid, **chosen_metrics, "weights": weights,
                                       "best_checkpoint_by": cfg.best_checkpoint_by, "best_score": score})
            # Only a whole epoch (trained, checked, recorded, a candidate for best.pt) goes to last.pt, so a run
            # stopped anywhere in an epoch resumes at its start and keeps its whole curve.
            resume_state["train_seconds"] = earlier_seconds + time.perf_counter() - started
            save_checkpoint(last_path, model, sig, config_dict, history_length=cfg.history_length, epoch=epoch,
                            optimizer=optimizer, extra=resume_state)
            write_training_curve(logdir, history)
            print(" ".join(f"{k} {v:.5g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()),
                  flush=True)
    if not rank.is_main:
        return {}
    if not best_path.exists():
        print(f"no epoch's rollout check stayed finite: {best_path} was not written; {last_path} is the last epoch",
              flush=True)
    summary = {"world_size": rank.world_size, "replica_checks": run.replica_checks, "optimizer_steps": run.step,
               "windows_seen": run.step * cfg.batch_size, "step_seconds": run.seconds,
               "best_checkpoint_by": cfg.best_checkpoint_by, "best_score": best_score,
               "best_score_meaning": best_score_meaning(cfg, rollout_units),
               "best_valid_loss": min((r["valid_loss"] for r in history), default=float("nan")),
               "best_checkpoint": str(best_path), "last_checkpoint": str(last_path),
               "averaged_checkpoint": str(averaged_path) if averaged is not None else None,
               "train_seconds": earlier_seconds + time.perf_counter() - started, "epochs": history,
               "train_windows": len(train_data), "parameters": sum(p.numel() for p in model.parameters())}
    write_text_atomic(logdir / "summary.yaml", yaml.safe_dump(summary, sort_keys=False))
    return summary


def write_training_curve(logdir: str | Path, history: list[dict[str, Any]]) -> None:
    """Write a run's per-epoch record as ``curve.csv`` and ``curve.png`` (validation loss and every rollout-check
    metric against the training windows seen, log-log), both replaced atomically after every epoch."""
    if not history:
        return
    import csv
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logdir = Path(logdir)
    columns = list(dict.fromkeys(key for record in history for key in record))
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(history)
    write_text_atomic(logdir / "curve.csv", text.getvalue())
    plotted = [k for k in columns if k not in _CURVE_BOOKKEEPING]
    windows = [r["windows_seen"] for r in history]
    fig, axes = plt.subplots(1, len(plotted), figsize=(4.2 * len(plotted), 3.4), squeeze=False)
    for ax, key in zip(axes[0], plotted, strict=True):
        points = [(w, r[key]) for w, r in zip(windows, history, strict=True)
                  if isinstance(r.get(key), float) and math.isfinite(r[key]) and r[key] > 0 and w > 0]
        if points:
            ax.loglog(*zip(*points, strict=True), marker=".")
        ax.set_xlabel("training windows seen")
        ax.set_title(key, fontsize=9)
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    tmp = logdir / "curve.tmp.png"
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, logdir / "curve.png")


_CURVE_BOOKKEEPING = frozenset({"epoch", "windows_seen", "step_seconds", "train_loss", "epoch_seconds",
                                ROLLOUT_DIVERGED, f"averaged_{ROLLOUT_DIVERGED}"})
"""Per-epoch record keys that are not plotted by :func:`write_training_curve` (the x axis, timing, the divergence
flag)."""


@dataclass
class _Progress:
    """Optimiser steps taken and the CPU time they used, against the optional time budget."""

    step: int
    """Optimiser steps so far (a resumed run starts where its last checkpoint's epoch ended)."""
    budget: float | None = None
    """``time_budget_minutes`` in seconds, or None."""
    seconds: float = 0.0
    """Seconds (by ``time_budget_clock``) of batch gathering and optimiser steps so far (this process; averaged over
    the ranks of a distributed run, so that every rank takes the same learning rate and stops at the same step):
    what the budget counts."""
    rank: Rank = field(default_factory=Rank)
    """This process's rank."""
    replica_checks: list[dict[str, Any]] = field(default_factory=list)
    """Distributed runs: the ranks' parameter checksums after the run's first step and after every epoch."""

    @property
    def budget_spent(self) -> bool:
        """Whether a budget is set and used up."""
        return self.budget is not None and self.seconds >= self.budget


def _joint_limits(cfg: TrainConfig, checkpoint: str | Path | None) -> tuple[tuple[int, float, float], ...]:
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


def _init_or_resume(cfg: TrainConfig, train_data: TrajectoryWindows, logdir: Path, device: str, resume: bool,
                    init_from: str | Path | None
                    ) -> tuple[NeRDModel, torch.optim.Optimizer, int, float, dict[str, Any]]:
    """A fresh model (statistics of the training set), a resumed run or one initialised from a checkpoint.

    Returns:
        (model in train mode, its Adam optimiser, first epoch to run, best checkpoint score so far, what the
        resumed run's last checkpoint recorded: ``step_seconds`` of the budget spent and the per-epoch
        ``history``; empty for a new run).
    """
    sig = train_data.signature
    start_epoch, optimizer_state, best_score, previous = 0, None, float("inf"), {}
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
        previous = dict(payload.get("extra") or {})
        best_score = _previous_best(logdir / "nn" / "best.pt", cfg.best_checkpoint_by)
    elif init_from is not None:
        model, ckpt_sig, _ = load_checkpoint(init_from, device)
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
        if to_dict(model.cfg) != to_dict(cfg.model):
            raise ConfigError(f"--init-from {init_from}: its model differs from the config's 'model' section "
                              f"({_differences(to_dict(model.cfg), to_dict(cfg.model), 'model')}); "
                              "make the config's model section match the checkpoint's")
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
    return model, optimizer, start_epoch, best_score, previous


def _best_score(cfg: TrainConfig, valid: float, rollout_metrics: dict[str, float]) -> float:
    """What ``best.pt`` minimises for one candidate model: its validation loss or its rollout check's summed errors."""
    return valid if cfg.best_checkpoint_by == "valid_loss" else sum(rollout_metrics.values())


def _weight_average(cfg: TrainConfig, model: NeRDModel, previous: dict[str, Any], init_from: str | Path | None
                    ) -> AveragedModel | None:
    """The running mean of ``average_weights_from`` (None when off): a resumed run's own, else a new one, which a
    fine-tune averaging from 0 starts with the weights it starts from."""
    if cfg.average_weights_from is None:
        return None
    # A copy of the model, normalisation buffers included (fixed during training, so they are not averaged).
    averaged = AveragedModel(model)
    if previous.get("averaged") is not None:
        averaged.load_state_dict(previous["averaged"])
    elif init_from is not None and cfg.average_weights_from == 0:
        averaged.update_parameters(model)
    return averaged


def check_resume_config(cfg: TrainConfig, model_cfg: ModelConfig, payload: dict[str, Any]) -> None:
    """Refuse to resume a run with a config that would change what its checkpoint holds.

    The model sizes, ``history_length`` and the training file stay those of the run (the weights, and the
    normalisation statistics of that file, come from the checkpoint); the schedule may change.

    Raises:
        ConfigError: Naming every key that differs and what to do instead.
    """
    changed = []
    if to_dict(model_cfg) != to_dict(cfg.model):
        changed.append(_differences(to_dict(model_cfg), to_dict(cfg.model), "model"))
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
    return _differences(old, new, "")


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str) -> str:
    """``key old -> new`` for every leaf that differs between two nested dicts."""
    parts = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(a, dict) and isinstance(b, dict):
            if a != b:
                parts.append(_differences(a, b, name))
        elif a != b:
            parts.append(f"{name} {a} -> {b}")
    return ", ".join(parts)


def _train_epoch(model: NeRDModel, loss_fn, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                 train_data: TrajectoryWindows, epoch: int, steps_per_epoch: int, seed: int, run: _Progress,
                 writer, progress: bool) -> list[float]:
    """One epoch of batch -> loss -> backward -> clip -> Adam step; returns the batch losses.

    ``loss_fn(inputs, target)`` is ``model.loss``, or its DistributedDataParallel wrapper under torchrun (each
    rank then takes its own share of every batch; the logged loss is the mean over the ranks). Advances ``run``
    (steps, CPU seconds) and stops early once its budget is spent.
    """
    total_steps = steps_per_epoch * cfg.num_epochs
    world = run.rank.world_size
    losses = []
    first_step = run.step
    # One shuffle per (seed, epoch): a resumed run sees the orders it would have seen uninterrupted (with any
    # number of processes: every rank draws the same global batches and takes its share).
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    batches = train_data.iterate(cfg.batch_size, generator, steps_per_epoch, shard=(run.rank.rank, world))
    bar = tqdm(batches, total=steps_per_epoch, desc=f"epoch {epoch}", disable=not progress)
    clock = time.perf_counter if cfg.time_budget_clock == "wall" else time.process_time
    tick = clock()
    for inputs, target in bar:
        if run.budget is not None:
            if run.budget_spent:
                break
            progress = run.seconds / run.budget
        else:
            progress = run.step / max(total_steps - 1, 1)
        lr = get_lr(progress, cfg.lr_start, cfg.lr_end, cfg.lr_warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        reported = accumulate_gradients(loss_fn, inputs, target, cfg.micro_batch_size, world > 1)
        if world > 1:  # every rank decides on the same (mean) loss, so a divergence stops all of them
            dist.all_reduce(reported)
            reported /= world
        value = reported.item()  # the step's one host sync (on a GPU)
        if not math.isfinite(value):  # before the optimiser step: the weights stay as they were
            raise RolloutDivergedError(f"training diverged: the loss is {value} at step {run.step} "
                                       f"(epoch {epoch}); lower lr_start or check the data")
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        losses.append(value)
        now = clock()
        elapsed, tick = now - tick, now
        if world > 1 and run.budget is not None:  # one clock for all ranks: the same lr and the same last step
            shared = torch.tensor([elapsed], dtype=torch.float64, device=reported.device)
            dist.all_reduce(shared)
            elapsed = float(shared) / world
        run.seconds += elapsed
        if run.step % 50 == 0:
            writer.add_scalar("losses/train", value, run.step)
            writer.add_scalar("losses/grad_norm", grad_norm.item(), run.step)
            writer.add_scalar("perf/lr", lr, run.step)
            bar.set_postfix(loss=f"{value:.4g}")
        run.step += 1
        if world > 1 and run.step == first_step + 1 and not run.replica_checks:
            _check_replicas(model, run)
    return losses


def accumulate_gradients(loss_fn, inputs: dict[str, torch.Tensor], target: torch.Tensor, micro: int | None,
                          distributed: bool) -> torch.Tensor:
    """Backward of the batch's mean loss, in micro-batches of at most ``micro`` windows (None: one pass); returns
    the detached loss. Under DDP the gradients are exchanged once, with the last micro-batch."""
    n = target.shape[0]
    micro = micro or n
    total = torch.zeros((), device=target.device)
    for start in range(0, n, micro):
        stop = min(start + micro, n)
        last = stop == n
        with nullcontext() if last or not distributed else loss_fn.no_sync():
            # Each part's mean weighted by its share: the sum is the whole batch's mean loss.
            loss = loss_fn({k: v[start:stop] for k, v in inputs.items()}, target[start:stop]) * ((stop - start) / n)
            loss.backward()
        total += loss.detach()
    return total


def _check_replicas(model: NeRDModel, run: _Progress) -> None:
    """Distributed runs: verify that every rank holds the same weights (recorded in the summary).

    Raises:
        RuntimeError: If the replicas differ (data-parallel training would silently train K different models).
    """
    if run.rank.world_size == 1:
        return
    sums = replica_checksums(model)
    run.replica_checks.append({"step": run.step, "checksums": sums})
    if any(s != sums[0] for s in sums):
        raise RuntimeError(f"the ranks' weights differ after step {run.step}: checksums {sums}")


class _ModelLoss(torch.nn.Module):
    """``model.loss`` as a module's forward, so that DistributedDataParallel can wrap it."""

    def __init__(self, model: NeRDModel):
        super().__init__()
        self.model = model

    def forward(self, inputs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        return self.model.loss(inputs, target)


class _NoWriter:
    """Stands in for the TensorBoard writer on ranks other than 0."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def add_text(self, *args, **kwargs) -> None:
        pass


def best_score_meaning(cfg: TrainConfig, units: dict[str, str] | None = None) -> str:
    """What the ``best_score`` of a run's summary measures (lower is better), in words, for its end line.

    ``units``: each rollout-check metric's unit, as the evaluation reports them (``metric_units``).
    """
    if cfg.best_checkpoint_by == "valid_loss":
        return "one-step validation loss: MSE of the normalised prediction targets"
    terms = " + ".join(f"{name} [{unit}]" for name, unit in (units or {}).items()) or "the robot's error metrics"
    r = cfg.rollout_eval
    return (f"sum of the per-epoch rollout check's passive errors, {terms}, each a mean over the {r.horizon} steps "
            f"of {r.num_envs} rollouts from the '{r.initial_states}' initial states")


def _evaluate_epoch(cfg: TrainConfig, model: NeRDModel, epoch: int, device: str, writer, robot_variant: str = "",
                    tag: str = "eval", units: dict[str, str] | None = None) -> dict[str, float]:
    """The end-of-epoch passive rollout of a copy of ``model`` against the ground truth (empty when switched off),
    in the robot variant the data came from; TensorBoard scalars go under ``tag``. ``units`` (a dict) receives
    each metric's unit."""
    if cfg.rollout_eval.num_envs <= 0:
        return {}
    from nerd.evaluation import evaluate_passive

    try:
        results = evaluate_passive(
            cfg.env_name, copy.deepcopy(model), NEURAL, cfg.rollout_eval.num_envs, cfg.rollout_eval.num_envs,
            cfg.rollout_eval.horizon, cfg.rollout_eval.seed, device=device, progress=False,
            robot_variant=robot_variant or None, initial_states=cfg.rollout_eval.initial_states,
            size_flags="rollout_eval.num_envs or rollout_eval.horizon", history_length=cfg.history_length,
        )
        metrics = results["metrics"]
        if units is not None:
            units.update(results["metric_units"])
    except RolloutDivergedError as err:
        # An early, under-trained model's rollout may blow up; that is a measurement of this epoch, not a reason
        # to lose the run. An infinite score keeps the epoch out of best.pt.
        print(f"epoch {epoch}: the rollout check diverged ({first_line(err)}); this epoch cannot be best.pt",
              flush=True)
        writer.add_scalar(f"{tag}/rollout_diverged", 1.0, epoch)
        return {ROLLOUT_DIVERGED: float("inf")}
    for name, value in metrics.items():
        writer.add_scalar(f"{tag}/{name}", value, epoch)
    return metrics


def _previous_best(path: Path, best_checkpoint_by: str) -> float:
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
