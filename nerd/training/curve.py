"""The training curve: a run's per-epoch record as ``curve.csv`` and ``curve.png``, rewritten after every epoch."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from nerd.run_dir import write_text_atomic
from nerd.training.config import ROLLOUT_DIVERGED


def write_training_curve(logdir: str | Path, history: list[dict[str, Any]]) -> None:
    """Write a run's per-epoch record as ``curve.csv`` and ``curve.png`` (validation loss and every rollout-check
    metric against the training windows seen, log-log), both replaced atomically (the training loop: after an epoch
    at most every ``CURVE_INTERVAL`` seconds, and at its end)."""
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
