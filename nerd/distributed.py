"""Several processes under ``torchrun``: the process group, each rank's device, rank-0-only side effects, and the
data-parallel steps of training (gradient accumulation under DDP, the loss averaged over ranks, replica checks).

``torchrun --nproc_per_node=K train/train.py ...`` starts K copies of the script with ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and the rendezvous address in the environment. :func:`init_distributed` joins the group (gloo on a
CPU, nccl on a GPU; a GPU run puts rank r on ``cuda:<LOCAL_RANK>``). Without those variables (a plain ``python``
run) everything here is a no-op for a world of one, so the single-process path is unchanged.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nerd.errors import UserError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that need it: the rank and device helpers serve command lines before
# they load the engine.


@dataclass(frozen=True)
class Rank:
    """This process's place in the run."""

    rank: int = 0
    """Global rank, 0 .. world_size - 1."""
    world_size: int = 1
    """Number of processes."""
    local_rank: int = 0
    """Rank on this machine (selects the GPU)."""

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes logs, checkpoints and summaries."""
        return self.rank == 0


def rank_from_env() -> Rank:
    """The rank torchrun set in the environment (a world of one without it)."""
    return Rank(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                int(os.environ.get("LOCAL_RANK", 0)))


def device_for_rank(device: str, rank: Rank) -> str:
    """``cuda`` becomes ``cuda:<local rank>`` in a multi-process run; an explicit GPU index there is an error."""
    if rank.world_size > 1 and device.startswith("cuda"):
        if device != "cuda":
            raise UserError(f"--device {device}: under torchrun pass --device cuda; each rank takes "
                            "cuda:<LOCAL_RANK> (restrict the GPUs with CUDA_VISIBLE_DEVICES)")
        return f"cuda:{rank.local_rank}"
    return device


def init_distributed(device: str) -> tuple[Rank, str]:
    """Join the torchrun process group when there is one: ``(rank, this rank's device)``.

    The backend is nccl for a GPU device and gloo otherwise. A world of one starts no group.
    """
    import torch
    import torch.distributed as dist

    rank = rank_from_env()
    device = device_for_rank(device, rank)
    if rank.world_size > 1 and not dist.is_initialized():
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return rank, device


def current_rank() -> Rank:
    """The rank of the initialised process group, or a world of one."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return Rank()
    return Rank(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


GLOO_RELEASE_SECONDS = 0.2
"""How long :func:`shutdown` leaves gloo's worker threads to drop their last finished work before the interpreter
finalises (see there)."""


def shutdown(completed: bool = True) -> None:
    """Leave the process group (end of a torchrun script).

    Gloo runs every collective on its own worker threads, and a worker drops its reference to a finished work
    object only after the caller has been told it finished. The work holds Python state, so the worker needs the
    GIL to free it; if the main thread has meanwhile reached interpreter finalisation, Python 3.11 ends the
    worker thread inside a C++ destructor and the process aborts ("terminate called without an active
    exception", SIGABRT). Seen under gdb: the worker freeing the barrier's work while the main thread was in
    ``Py_FinalizeEx``. So after a completed run every rank first waits for the others (a rank that left while
    rank 0 still wrote checkpoints aborted about one run in three after its last DDP all-reduce), leaves the
    group, and then sleeps ``GLOO_RELEASE_SECONDS`` with the GIL released so that the workers can drop that
    barrier's work while the interpreter is whole (without the pause, about 1 launch in 60 of a loaded 2-core
    machine aborted). After a failure (``completed=False``) no rank waits, since the failed rank's peers may
    never reach the barrier; torchrun stops them.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    if completed:
        dist.barrier()
    dist.destroy_process_group()
    if completed:
        time.sleep(GLOO_RELEASE_SECONDS)


def replica_checksums(module: torch.nn.Module) -> list[list[float]]:
    """Every rank's ``[sum, weighted sum]`` of its parameters (float64), gathered on every rank.

    Identical weights give identical pairs; the weighted sum (by position) makes a permutation or a sign
    flip visible. Used to verify that data-parallel replicas stayed identical.
    """
    import torch
    import torch.distributed as dist

    flat = torch.cat([p.detach().flatten().double() for p in module.parameters()])
    weights = torch.linspace(1.0, 2.0, len(flat), dtype=torch.float64, device=flat.device)
    local = torch.stack([flat.sum(), (flat * weights).sum()])
    if not dist.is_initialized():
        return [local.tolist()]
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return [g.tolist() for g in gathered]


def accumulate_gradients(loss_fn, inputs: dict[str, torch.Tensor], target: torch.Tensor, micro: int | None,
                         distributed: bool, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Backward of the batch's mean loss (each window's times its ``weights`` entry, when given), in micro-batches of
    at most ``micro`` windows (None: one pass); returns the detached loss. Under DDP (``distributed``: ``loss_fn``
    is a DistributedDataParallel module) the gradients are exchanged once, with the last micro-batch."""
    import torch

    n = target.shape[0]
    micro = micro or n
    total = torch.zeros((), device=target.device)
    for start in range(0, n, micro):
        stop = min(start + micro, n)
        last = stop == n
        with nullcontext() if last or not distributed else loss_fn.no_sync():
            # Each part's mean weighted by its share: the sum is the whole batch's mean loss.
            part = None if weights is None else weights[start:stop]
            loss = loss_fn({k: v[start:stop] for k, v in inputs.items()}, target[start:stop], part)
            loss = loss * ((stop - start) / n)
            loss.backward()
        total += loss.detach()
    return total


def distributed_loss(model: torch.nn.Module, device: str) -> torch.nn.parallel.DistributedDataParallel:
    """``model.loss(inputs, target, weights)`` as the forward of a DistributedDataParallel module (DDP wraps a module's
    forward), on ``device``'s GPU or the CPU."""
    import torch

    class ModelLoss(torch.nn.Module):
        """``model.loss`` as a module's forward."""

        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, inputs: dict[str, torch.Tensor], target: torch.Tensor,
                    weights: torch.Tensor | None = None) -> torch.Tensor:
            return self.model.loss(inputs, target, weights)

    device_ids = [torch.device(device).index] if torch.device(device).type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(ModelLoss(model), device_ids=device_ids)


def mean_over_ranks(value: torch.Tensor, world_size: int) -> torch.Tensor:
    """``value`` averaged over every rank (all-reduced in place), so that all ranks decide alike."""
    import torch.distributed as dist

    dist.all_reduce(value)
    value /= world_size
    return value


def check_replicas(module: torch.nn.Module, rank: Rank, step: int, checks: list[dict[str, Any]]) -> None:
    """Distributed runs: verify that every rank holds the same weights; appends the checksums to ``checks`` (for
    the run's summary). A no-op in a world of one.

    Raises:
        RuntimeError: If the replicas differ (data-parallel training would silently train K different models).
    """
    if rank.world_size == 1:
        return
    sums = replica_checksums(module)
    checks.append({"step": step, "checksums": sums})
    if any(s != sums[0] for s in sums):
        raise RuntimeError(f"the ranks' weights differ after step {step}: checksums {sums}")
