"""Up-front checks that a request fits the machine: a 10^9-sized job is refused with what it would need.

The estimates count the arrays a job allocates in proportion to its size (rollout buffers, per-trajectory
statistics, dataset bytes); they are lower bounds, so a refused request would certainly not have fitted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from nerd.errors import UserError


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps the number >= 1, e.g. ``'3.2 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def available_memory(device: str | torch.device) -> int:
    """Bytes a job could still allocate on ``device``: free GPU memory, or the host's available memory."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_memory(needed: float, what: str, device: str | torch.device, advice: str) -> None:
    """Refuse a job whose arrays (``needed`` bytes, a lower bound) exceed the memory available on ``device``.

    Raises:
        UserError: Naming ``what`` needs the memory, the amounts, and ``advice`` (which flag to lower).
    """
    available = available_memory(device)
    if needed > available:
        raise UserError(f"{what} needs at least {format_bytes(needed)} of memory on {device}, "
                        f"{format_bytes(available)} is available; {advice}")


def check_disk(needed: float, what: str, path: str | Path, advice: str) -> None:
    """Refuse to write ``needed`` bytes (an estimate) under ``path`` when the file system has less free space.

    Raises:
        UserError: Naming ``what``, the amounts and ``advice``.
    """
    existing = Path(path).resolve()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise UserError(f"{what} needs about {format_bytes(needed)} of disk, {format_bytes(free)} is free in "
                        f"{existing}; {advice}")
