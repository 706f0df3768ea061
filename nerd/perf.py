"""Measuring speed against a FLOP floor: model FLOPs, the machine's matmul rate, repeated timings.

The floor of a neural step is the model's FLOPs divided by what the machine's matrix multiply sustains; the
benchmarks (bench/) report the share of that floor a step achieves. FLOPs are counted by torch's own
``FlopCounterMode`` on the exact call that is timed (matmuls and attention; element-wise work is not counted,
so a share near 100 % means the matmuls are all that is left).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs (a multiply-add counts 2) of the matmuls and attention that one call of ``fn`` runs."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (timing only; a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], repeats: int = 7, min_seconds: float = 0.2,
              device: torch.device | str = "cpu") -> dict[str, float]:
    """Seconds per call of ``fn``: each of ``repeats`` samples runs it for at least ``min_seconds``.

    Returns ``{"best": ..., "median": ...}`` over the samples; on a shared machine the best is the least
    disturbed, the median the typical.
    """
    fn()  # warm-up: allocator, lazy initialisation, kernel caches
    synchronize(device)
    samples = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            synchronize(device)
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        samples.append(elapsed / calls)
    return {"best": min(samples), "median": statistics.median(samples)}


def time_alternating(fns: dict[str, Callable[[], object]], repeats: int = 7, min_seconds: float = 0.2,
                     device: torch.device | str = "cpu") -> dict[str, dict[str, float]]:
    """:func:`time_call` for several functions whose samples alternate (a, b, c, a, b, c, ...), so that a
    change of load on a shared machine hits all of them alike: name -> ``{"best": ..., "median": ...}``."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    synchronize(device)
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(time_call(fn, 1, min_seconds, device)["best"])
    return {name: {"best": min(s), "median": statistics.median(s)} for name, s in samples.items()}


def matmul_rate(device: torch.device | str = "cpu", size: int = 1024, repeats: int = 7,
                min_seconds: float = 0.2) -> dict[str, float]:
    """The machine's float32 matmul rate [FLOP/s] on square ``size`` matrices: ``{"best": ..., "median": ...}``.

    Measured with the current torch thread count, which the caller fixes to match what it compares with.
    """
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=gen).to(device) for _ in range(2))
    out = torch.empty(size, size, device=device)
    seconds = time_call(lambda: torch.mm(a, b, out=out), repeats, min_seconds, device)
    flops = 2.0 * size**3
    return {"best": flops / seconds["best"], "median": flops / seconds["median"]}
