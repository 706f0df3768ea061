"""The training run: from validated inputs through the epochs to the run directory's checkpoints and summary.

After every epoch rank 0 validates the weights (and their running mean, ``average_weights_from``), runs the short
passive rollout check, writes TensorBoard scalars, ``nn/last.pt`` (what ``--resume`` continues), ``nn/best.pt``
(by rollout error or validation loss) and the training curve.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from torch.optim.swa_utils import AveragedModel

from nerd.checkpoint import save_checkpoint
from nerd.config import ConfigError, to_dict
from nerd.datasets.windows import TrajectoryWindows
from nerd.distributed import Rank, current_rank, distributed_loss
from nerd.errors import UserError
from nerd.features import RobotSignature
from nerd.run_dir import (
    ExclusiveLock,
    check_run_dir,
    new_run_dir,
    recover_previous_run,
    write_run_record,
    write_text_atomic,
)
from nerd.training.config import RUN_CHECKPOINT, RUN_DIR_ENTRIES, TrainConfig, model_options
from nerd.training.curve import write_training_curve
from nerd.training.epoch import Candidate, Progress, best_score_meaning, evaluate_epoch, selection_score, train_epoch
from nerd.training.resume import ResumeState, RunStart, init_or_resume, joint_limits, weight_average
from nerd.training.schedule import validation_loss

CURVE_INTERVAL = 30.0
"""Seconds between two rewrites of ``curve.csv``/``curve.png`` during a run (and once at its end): a plot per epoch
cost more than the epochs of a run on a few trajectories."""


@dataclass(frozen=True)
class RunRequest:
    """What :func:`train` was asked for, beside the config (see there)."""

    logdir: Path
    device: str = "cpu"
    seed: int | None = None
    """None until :func:`_train` settles it (0, or a resumed run's own)."""
    resume: bool = False
    init_from: str | Path | None = None
    overwrite: bool = False
    progress: bool = True


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
    request = RunRequest(Path(logdir), device, seed, resume, init_from, overwrite, progress)
    logdir = request.logdir
    if not rank.is_main:
        return _train(cfg, request, rank)
    # One run per directory: a second process would score the first one's checkpoints as its own. The lock sits
    # beside the directory, so that a failed start leaves no directory behind.
    logdir.parent.mkdir(parents=True, exist_ok=True)
    lock = ExclusiveLock(logdir.parent / f".{logdir.name}.lock",
                         f"another process is training in {logdir}; wait for it or choose another --logdir")
    try:
        # A run set aside by an --overwrite that was killed before the new run's first checkpoint comes back.
        recover_previous_run(logdir, RUN_DIR_ENTRIES, RUN_CHECKPOINT)
        return _train(cfg, request, rank)
    finally:
        lock.release()


def _train(cfg: TrainConfig, request: RunRequest, rank: Rank) -> dict[str, Any]:
    """Read and check the data, build or load the model, settle the seed, then run :func:`_train_loop` in the
    prepared run directory."""
    logdir, device, seed, resume = request.logdir, request.device, request.seed, request.resume
    if not resume and rank.is_main:
        check_run_dir(logdir, RUN_DIR_ENTRIES, request.overwrite)  # fail fast, before the datasets are read
    limits = joint_limits(cfg, logdir / "nn" / "last.pt" if resume else request.init_from)
    options = model_options(cfg.model)
    train_data = TrajectoryWindows(cfg.dataset.train, cfg.history_length, device, cfg.dataset.max_train_trajectories,
                                   joint_limits=limits, joint_limit_lookahead=cfg.joint_limit_lookahead,
                                   model_options=options, weights=cfg.dataset.train_weights)
    valid_data = TrajectoryWindows(cfg.dataset.valid, cfg.history_length, device, joint_limits=limits,
                                   joint_limit_lookahead=cfg.joint_limit_lookahead, model_options=options,
                                   weights=cfg.dataset.valid_weights)
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
    start = init_or_resume(cfg, train_data, logdir, device, resume, request.init_from)
    recorded = start.previous.seed  # runs resumed from checkpoints written before the seed was recorded: None
    if seed is not None and recorded is not None and seed != recorded:
        raise UserError(f"the run in {logdir} was trained with seed {recorded}; resuming it with seed {seed} would "
                        f"change its batch orders (leave the seed out to continue with the run's own)")
    request = replace(request, seed=seed if seed is not None else (recorded or 0))
    ranks = start.previous.world_size
    if ranks is not None and ranks != rank.world_size and rank.is_main:
        # Each rank draws its own share of every batch, so the batch orders differ from the run's from here on.
        print(f"resuming a run trained on {ranks} process(es) on {rank.world_size}: the batch size stays "
              f"{cfg.batch_size}, split over {rank.world_size}; the batch orders differ from here on", flush=True)

    # Rank 0 alone writes the run directory; the other ranks only train.
    run_dir = (nullcontext(logdir) if resume or not rank.is_main
               else new_run_dir(logdir, RUN_DIR_ENTRIES, request.overwrite, RUN_CHECKPOINT))
    if rank.is_main:
        start.averaged = weight_average(cfg, start.model, start.previous, request.init_from)
    with run_dir:
        return _train_loop(cfg, request, start, train_data, valid_data)


def _train_loop(cfg: TrainConfig, request: RunRequest, start: RunStart, train_data: TrajectoryWindows,
                valid_data: TrajectoryWindows) -> dict[str, Any]:
    """The epochs of :func:`train`, once every input is validated, in the prepared run directory (``request``'s
    seed settled).

    ``start.averaged`` (rank 0 only, ``average_weights_from``) takes the weights at each epoch's end once the run is
    far enough along; it is validated, rollout-checked and saved as ``nn/averaged.pt``, and competes for ``best.pt``.

    Under torchrun every rank runs this loop on its own shard of each batch, with gradients averaged by
    DistributedDataParallel; rank 0 alone validates, evaluates and writes (the others return an empty summary).
    """
    from torch.utils.tensorboard import SummaryWriter

    logdir, model, averaged = request.logdir, start.model, start.averaged
    rank = current_rank()
    rollout_units: dict[str, str] = {}  # unit of each rollout-check metric, filled by evaluate_epoch
    sig = train_data.signature
    config_dict = to_dict(cfg)
    if rank.is_main:
        write_run_record(logdir, config_dict)
    loss_fn = distributed_loss(model, request.device) if rank.world_size > 1 else model.loss
    batches = len(range(0, len(train_data), cfg.batch_size))
    steps_per_epoch = min(batches, cfg.batches_per_epoch or batches)
    if cfg.batches_per_epoch is not None and cfg.batches_per_epoch > batches and rank.is_main:
        # An epoch is one pass over the windows at most; say so rather than run fewer batches silently.
        print(f"batches_per_epoch {cfg.batches_per_epoch} exceeds the {batches} batches of one pass over the "
              f"{len(train_data):,} training windows; each epoch runs {batches}", flush=True)
    best_path, last_path = logdir / "nn" / "best.pt", logdir / "nn" / "last.pt"
    best_score = start.best_score
    # A resumed run's summary and curve keep the epochs before the interruption.
    history: list[dict[str, float]] = list(start.previous.history)
    # Wall-clock seconds of the run before it was interrupted, so that a resumed run's summary counts the whole run.
    earlier_seconds = start.previous.train_seconds
    started = time.perf_counter()
    curve_written = -math.inf
    # A resumed run continues its budget (and the learning rate that decays over it) where its last epoch ended.
    # The steps the interrupted run took (an epoch cut short by its budget has fewer than steps_per_epoch);
    # checkpoints from before this was recorded fall back to whole epochs.
    steps = start.previous.optimizer_steps
    run = Progress(step=int(steps if steps is not None else start.epoch * steps_per_epoch),
                   budget=cfg.time_budget_minutes * 60.0 if cfg.time_budget_minutes else None,
                   seconds=start.previous.step_seconds, rank=rank)
    with SummaryWriter(str(logdir)) if rank.is_main else _NoWriter() as writer:
        writer.add_text("hyperparameters",
                        "|key|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config_dict.items()))
        for epoch in range(start.epoch, cfg.num_epochs):
            if run.budget_spent:
                break
            epoch_start = time.perf_counter()
            losses = train_epoch(model, loss_fn, start.optimizer, cfg, train_data, epoch, steps_per_epoch,
                                 request.seed, run, writer, request.progress and rank.is_main)
            epoch_seconds = time.perf_counter() - epoch_start
            run.check_replicas(model)
            if not rank.is_main:
                continue
            valid = validation_loss(model, valid_data, cfg.batch_size, cfg.valid_batches, request.seed + 1)
            # What --resume needs, as the run stands at this epoch's end.
            resume_state = ResumeState(step_seconds=run.seconds, optimizer_steps=run.step, history=history,
                                       seed=request.seed, world_size=rank.world_size)
            # The check steps a copy of the epoch's weights (evaluation puts its model in eval mode); no file
            # stands between them, so nothing another process writes can be checked in their place.
            ckpt_metrics = evaluate_epoch(cfg, model, epoch, request.device, writer, sig.robot_variant,
                                          units=rollout_units)
            writer.add_scalar("losses/valid", valid, epoch)
            writer.add_scalar("perf/windows_per_second", len(losses) * cfg.batch_size / epoch_seconds, epoch)
            record = {"epoch": epoch, "windows_seen": run.step * cfg.batch_size, "step_seconds": run.seconds,
                      "train_loss": sum(losses) / max(len(losses), 1), "valid_loss": valid,
                      "epoch_seconds": epoch_seconds, **ckpt_metrics}
            candidates = [Candidate(selection_score(cfg, valid, ckpt_metrics), model, valid, ckpt_metrics, "trained")]
            if averaged is not None:
                fraction = run.seconds / run.budget if run.budget else run.step / (steps_per_epoch * cfg.num_epochs)
                if fraction >= cfg.average_weights_from:
                    averaged.update_parameters(model)
                resume_state.averaged = averaged.state_dict()
                if int(averaged.n_averaged) > 0:
                    candidates.append(_averaged_candidate(cfg, request, averaged, valid_data, sig, epoch, writer,
                                                          record))
            history.append(record)  # ``history`` is resume_state's list: last.pt, saved below, includes this epoch
            best = min(candidates, key=lambda c: c.score)
            if best.score < best_score:
                best_score = best.score
                save_checkpoint(best_path, best.model, sig, config_dict, history_length=cfg.history_length,
                                epoch=epoch, extra={"valid_loss": best.valid_loss, **best.metrics,
                                                    "weights": best.weights,
                                                    "best_checkpoint_by": cfg.best_checkpoint_by,
                                                    "best_score": best.score})
            # Only a whole epoch (trained, checked, recorded, a candidate for best.pt) goes to last.pt, so a run
            # stopped anywhere in an epoch resumes at its start and keeps its whole curve.
            resume_state.train_seconds = earlier_seconds + time.perf_counter() - started
            save_checkpoint(last_path, model, sig, config_dict, history_length=cfg.history_length, epoch=epoch,
                            optimizer=start.optimizer, extra=resume_state.to_extra())
            if time.perf_counter() - curve_written >= CURVE_INTERVAL:
                write_training_curve(logdir, history)
                curve_written = time.perf_counter()
            print(" ".join(f"{k} {v:.5g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()),
                  flush=True)
    if not rank.is_main:
        return {}
    write_training_curve(logdir, history)
    if not best_path.exists():
        print(f"no epoch's rollout check stayed finite: {best_path} was not written; {last_path} is the last epoch",
              flush=True)
    summary = {"world_size": rank.world_size, "replica_checks": run.replica_checks, "optimizer_steps": run.step,
               "windows_seen": run.step * cfg.batch_size, "step_seconds": run.seconds,
               "best_checkpoint_by": cfg.best_checkpoint_by, "best_score": best_score,
               "best_score_meaning": best_score_meaning(cfg, rollout_units),
               "best_valid_loss": min((r["valid_loss"] for r in history), default=float("nan")),
               "best_checkpoint": str(best_path), "last_checkpoint": str(last_path),
               "averaged_checkpoint": str(_averaged_path(logdir)) if averaged is not None else None,
               "train_seconds": earlier_seconds + time.perf_counter() - started, "epochs": history,
               "train_windows": len(train_data), "parameters": sum(p.numel() for p in model.parameters())}
    write_text_atomic(logdir / "summary.yaml", yaml.safe_dump(summary, sort_keys=False))
    return summary


def _averaged_path(logdir: Path) -> Path:
    """Where a run keeps its running weight average."""
    return logdir / "nn" / "averaged.pt"


def _averaged_candidate(cfg: TrainConfig, request: RunRequest, averaged: AveragedModel,
                        valid_data: TrajectoryWindows, sig: RobotSignature, epoch: int, writer,
                        record: dict[str, Any]) -> Candidate:
    """The running weight average at an epoch's end: validated, saved as ``nn/averaged.pt``, rollout-checked, its
    numbers added to the epoch's ``record`` (``averaged_*``); returned as a candidate for ``best.pt``."""
    mean = averaged.module
    mean_valid = validation_loss(mean, valid_data, cfg.batch_size, cfg.valid_batches, request.seed + 1)
    save_checkpoint(_averaged_path(request.logdir), mean, sig, to_dict(cfg), history_length=cfg.history_length,
                    epoch=epoch, extra={"valid_loss": mean_valid, "weights_averaged": int(averaged.n_averaged)})
    mean_metrics = evaluate_epoch(cfg, mean, epoch, request.device, writer, sig.robot_variant, tag="eval_averaged")
    writer.add_scalar("losses/valid_averaged", mean_valid, epoch)
    record.update({"averaged_valid_loss": mean_valid,
                   **{f"averaged_{name}": value for name, value in mean_metrics.items()}})
    return Candidate(selection_score(cfg, mean_valid, mean_metrics), mean, mean_valid, mean_metrics, "averaged")


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
