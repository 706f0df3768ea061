"""One epoch of training (batch -> loss -> backward -> clip -> Adam step), the rollout check that follows it, and
the candidates for ``best.pt`` that the check scores."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from nerd.datasets.windows import TrajectoryWindows
from nerd.distributed import Rank, accumulate_gradients, check_replicas, mean_over_ranks
from nerd.errors import RolloutDivergedError, first_line
from nerd.models.nerd_model import NeRDModel
from nerd.modes import NEURAL
from nerd.training.config import ROLLOUT_DIVERGED, TrainConfig
from nerd.training.schedule import get_lr


@dataclass
class Progress:
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

    def check_replicas(self, model: NeRDModel) -> None:
        """Distributed runs: verify that every rank holds the same weights (:func:`~nerd.distributed.check_replicas`),
        recorded in :attr:`replica_checks`."""
        check_replicas(model, self.rank, self.step, self.replica_checks)


def train_epoch(model: NeRDModel, loss_fn, optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                train_data: TrajectoryWindows, epoch: int, steps_per_epoch: int, seed: int, run: Progress,
                writer, progress: bool) -> list[float]:
    """One epoch of batch -> loss -> backward -> clip -> Adam step; returns the batch losses.

    ``loss_fn(inputs, target, weights)`` is ``model.loss``, or its DistributedDataParallel wrapper under torchrun (each
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
    for inputs, target, weights in bar:
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
        reported = accumulate_gradients(loss_fn, inputs, target, cfg.micro_batch_size, world > 1, weights)
        if world > 1:  # every rank decides on the same (mean) loss, so a divergence stops all of them
            reported = mean_over_ranks(reported, world)
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
            elapsed = float(mean_over_ranks(torch.tensor([elapsed], dtype=torch.float64, device=reported.device),
                                            world))
        run.seconds += elapsed
        if run.step % 50 == 0:
            writer.add_scalar("losses/train", value, run.step)
            writer.add_scalar("losses/grad_norm", grad_norm.item(), run.step)
            writer.add_scalar("perf/lr", lr, run.step)
            bar.set_postfix(loss=f"{value:.4g}")
        run.step += 1
        if world > 1 and run.step == first_step + 1 and not run.replica_checks:
            run.check_replicas(model)
    return losses


def evaluate_epoch(cfg: TrainConfig, model: NeRDModel, epoch: int, device: str, writer, robot_variant: str = "",
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


@dataclass
class Candidate:
    """A model competing for ``best.pt`` at an epoch's end: the trained weights or their running mean."""

    score: float
    """What ``best.pt`` minimises (:func:`selection_score`)."""
    model: NeRDModel
    valid_loss: float
    metrics: dict[str, float]
    """The rollout check's metrics."""
    weights: str
    """``"trained"`` or ``"averaged"``, recorded in ``best.pt``."""


def selection_score(cfg: TrainConfig, valid: float, rollout_metrics: dict[str, float]) -> float:
    """What ``best.pt`` minimises for one candidate model: its validation loss or its rollout check's summed errors."""
    return valid if cfg.best_checkpoint_by == "valid_loss" else sum(rollout_metrics.values())


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
