"""Training a NeRD model: one explicit loop over dataset windows (spec §7).

batch -> normalised MSE over every causal position -> backward -> clip -> Adam step, with a linear learning-
rate decay; after every epoch a validation loss, a short passive rollout against the ground truth, TensorBoard
scalars and checkpoints (``nn/last.pt`` and ``nn/best.pt`` by validation loss) in the run directory.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm import tqdm

from nerd.checkpoint import load_checkpoint, save_checkpoint
from nerd.config import ConfigError, to_dict
from nerd.datasets.windows import TrajectoryWindows
from nerd.errors import UserError
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.modes import NEURAL
from nerd.run_dir import write_run_record, write_text_atomic

RUN_DIR_ENTRIES = ("nn", "config.yaml", "git.yaml", "summary.yaml")
"""What a training run writes in its directory besides TensorBoard events (what ``--overwrite`` removes)."""


@dataclass
class DatasetConfig:
    """Where the training data is."""

    train: str = ""
    """Training HDF5 file (relative paths are relative to the working directory of the command)."""
    valid: str = ""
    """Validation HDF5 file."""
    max_train_trajectories: int | None = None
    """Use only the first trajectories of the training file; None for all."""


@dataclass
class RolloutEvalConfig:
    """The short passive rollout evaluated after every epoch."""

    num_envs: int = 64
    """Trajectories rolled out."""
    horizon: int = 100
    """Steps per trajectory."""
    seed: int = 500
    """Seed of the initial states."""


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
    grad_clip: float = 1.0
    """Gradient-norm clip."""
    rollout_eval: RolloutEvalConfig = field(default_factory=RolloutEvalConfig)
    """Per-epoch passive rollout check."""

    def __post_init__(self) -> None:
        # Checked when the config loads, not clamped later: a history the model cannot see is a config error.
        if self.history_length < 1:
            raise ConfigError(f"config key 'history_length': must be positive, got {self.history_length}")
        block_size = self.model.transformer.block_size
        if self.model.type == "transformer" and self.history_length > block_size:
            raise ConfigError(f"config key 'history_length': {self.history_length} exceeds "
                              f"model.transformer.block_size {block_size}, the transformer's context; "
                              "shorten the history or enlarge block_size")


def get_lr(step: int, total_steps: int, lr_start: float, lr_end: float) -> float:
    """Linear decay from ``lr_start`` at step 0 to ``lr_end`` at the last step."""
    frac = min(step / max(total_steps - 1, 1), 1.0)
    return lr_start + frac * (lr_end - lr_start)


@torch.no_grad()
def validation_loss(model: NeRDModel, data: TrajectoryWindows, batch_size: int, batches: int, seed: int) -> float:
    """Mean normalised loss over ``batches`` random validation batches (the same ones every epoch)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    losses = [model.loss(x, y).item() for x, y in data.iterate(batch_size, generator, batches)]
    model.train()
    return sum(losses) / max(len(losses), 1)


def train(cfg: TrainConfig, logdir: str | Path, device: str = "cpu", seed: int = 0,
          checkpoint: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Train a NeRD model; returns a summary (best validation loss, checkpoint paths, time).

    ``checkpoint``: resume that run (same training file: its weights, optimiser and epoch) or fine-tune it on a
    new training file (its weights and normalisation statistics, a fresh optimiser, from epoch 0).
    """
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    logdir = Path(logdir)
    train_data = TrajectoryWindows(cfg.dataset.train, cfg.history_length, device, cfg.dataset.max_train_trajectories)
    valid_data = TrajectoryWindows(cfg.dataset.valid, cfg.history_length, device)
    sig = train_data.signature
    for name, data in (("training", train_data), ("validation", valid_data)):
        if data.signature.env_name != cfg.env_name:
            raise UserError(
                f"the {name} dataset is for {data.signature.env_name}, but the config trains {cfg.env_name}")
    valid_data.signature.check_compatible(sig, what="validation dataset")
    model, optimizer, start_epoch, best_valid = _init_or_resume(cfg, train_data, logdir, device, checkpoint)

    logdir.mkdir(parents=True, exist_ok=True)
    config_dict = to_dict(cfg)
    write_run_record(logdir, config_dict)
    writer = SummaryWriter(str(logdir))
    writer.add_text("hyperparameters", "|key|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in config_dict.items()))

    batches = len(range(0, len(train_data), cfg.batch_size))
    steps_per_epoch = min(batches, cfg.batches_per_epoch or batches)
    best_path, last_path = logdir / "nn" / "best.pt", logdir / "nn" / "last.pt"
    history: list[dict[str, float]] = []
    started = time.perf_counter()
    for epoch in range(start_epoch, cfg.num_epochs):
        epoch_start = time.perf_counter()
        losses = _train_epoch(model, optimizer, cfg, train_data, epoch, steps_per_epoch, seed, writer, progress)
        epoch_seconds = time.perf_counter() - epoch_start
        valid = validation_loss(model, valid_data, cfg.batch_size, cfg.valid_batches, seed + 1)
        save_checkpoint(last_path, model, sig, config_dict, history_length=cfg.history_length, epoch=epoch,
                        optimizer=optimizer)
        ckpt_metrics = _evaluate_epoch(cfg, last_path, epoch, device, writer)
        writer.add_scalar("losses/valid", valid, epoch)
        writer.add_scalar("perf/windows_per_second", len(losses) * cfg.batch_size / epoch_seconds, epoch)
        record = {"epoch": epoch, "train_loss": sum(losses) / max(len(losses), 1), "valid_loss": valid,
                  "epoch_seconds": epoch_seconds, **ckpt_metrics}
        history.append(record)
        print(" ".join(f"{k} {v:.5g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()), flush=True)
        if valid < best_valid:
            best_valid = valid
            save_checkpoint(best_path, model, sig, config_dict, history_length=cfg.history_length, epoch=epoch,
                            extra={"valid_loss": valid, **ckpt_metrics})
    writer.close()
    summary = {"best_valid_loss": best_valid, "best_checkpoint": str(best_path), "last_checkpoint": str(last_path),
               "train_seconds": time.perf_counter() - started, "epochs": history,
               "train_windows": len(train_data), "parameters": sum(p.numel() for p in model.parameters())}
    write_text_atomic(logdir / "summary.yaml", yaml.safe_dump(summary, sort_keys=False))
    return summary


def _init_or_resume(cfg: TrainConfig, train_data: TrajectoryWindows, logdir: Path, device: str,
                    checkpoint: str | Path | None) -> tuple[NeRDModel, torch.optim.Optimizer, int, float]:
    """A fresh model (statistics of the training set), a resumed run or a fine-tuned one.

    Returns:
        (model in train mode, its Adam optimiser, first epoch to run, best validation loss so far).
    """
    sig = train_data.signature
    start_epoch, optimizer_state, best_valid = 0, None, float("inf")
    if checkpoint is not None:
        model, ckpt_sig, payload = load_checkpoint(checkpoint, device)
        ckpt_sig.check_compatible(sig, what="checkpoint")
        if Path(payload["config"]["dataset"]["train"]).resolve() == Path(cfg.dataset.train).resolve():
            start_epoch, optimizer_state = payload["epoch"] + 1, payload["optimizer_state"]
            best_valid = _previous_best(Path(checkpoint).parent / "best.pt", logdir / "nn" / "best.pt")
    else:
        model = NeRDModel(sig.input_groups, sig.target_dim, cfg.model).to(device)
        # Statistics of every step of the training set, computed once.
        inputs = {k: v.flatten(0, 1) for k, v in train_data.inputs.items()}
        model.update_statistics(inputs, train_data.targets.flatten(0, 1))
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr_start)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    return model, optimizer, start_epoch, best_valid


def _train_epoch(model: NeRDModel, optimizer: torch.optim.Optimizer, cfg: TrainConfig, train_data: TrajectoryWindows,
                 epoch: int, steps_per_epoch: int, seed: int, writer, progress: bool) -> list[float]:
    """One epoch of batch -> loss -> backward -> clip -> Adam step; returns the batch losses."""
    total_steps = steps_per_epoch * cfg.num_epochs
    step = epoch * steps_per_epoch
    losses = []
    # One shuffle per (seed, epoch): a resumed run sees the orders it would have seen uninterrupted.
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    bar = tqdm(train_data.iterate(cfg.batch_size, generator, steps_per_epoch), total=steps_per_epoch,
               desc=f"epoch {epoch}", disable=not progress)
    for inputs, target in bar:
        lr = get_lr(step, total_steps, cfg.lr_start, cfg.lr_end)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model.loss(inputs, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if step % 50 == 0:
            writer.add_scalar("losses/train", loss.item(), step)
            writer.add_scalar("losses/grad_norm", grad_norm.item(), step)
            writer.add_scalar("perf/lr", lr, step)
            bar.set_postfix(loss=f"{loss.item():.4g}")
        step += 1
    return losses


def _evaluate_epoch(cfg: TrainConfig, checkpoint: Path, epoch: int, device: str, writer) -> dict[str, float]:
    """The end-of-epoch passive rollout of ``checkpoint`` against the ground truth (empty when switched off)."""
    if cfg.rollout_eval.num_envs <= 0:
        return {}
    from nerd.evaluation import evaluate_passive

    metrics = evaluate_passive(
        cfg.env_name, str(checkpoint), NEURAL, cfg.rollout_eval.num_envs, cfg.rollout_eval.num_envs,
        cfg.rollout_eval.horizon, cfg.rollout_eval.seed, device=device, progress=False,
    )["metrics"]
    for name, value in metrics.items():
        writer.add_scalar(f"eval/{name}", value, epoch)
    return metrics


def _previous_best(source: Path, target: Path) -> float:
    """Validation loss of a resumed run's best checkpoint, copied into the new run directory if it is elsewhere."""
    if not source.is_file():
        return float("inf")
    if source.resolve() != target.resolve():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    extra = torch.load(source, map_location="cpu", weights_only=True).get("extra", {})
    return float(extra.get("valid_loss", float("inf")))
