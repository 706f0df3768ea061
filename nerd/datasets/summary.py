"""Human-readable summary and plots of a trajectory dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from nerd.datasets.hdf5 import read_attrs
from nerd.features import active_contact_mask

# Statistics are computed on at most this many trajectories so that a summary of a 10 M-transition file is quick.
MAX_SUMMARY_TRAJECTORIES = 4096


def summarize_dataset(path: str | Path) -> dict[str, Any]:
    """Counts, dimensions and per-coordinate state statistics of a dataset.

    Returns:
        A dict with the file attributes and ``state_min``/``state_max``/``state_mean``/``state_std`` lists and
        ``contact_active_fraction`` (share of candidates the model treats as active, or None).
    """
    attrs = read_attrs(path)
    with h5py.File(path, "r") as f:
        states = f["data/states"][:MAX_SUMMARY_TRAJECTORIES]
        depths = f["data/contact_depths"][:MAX_SUMMARY_TRAJECTORIES]
        thicknesses = f["data/contact_thicknesses"][:MAX_SUMMARY_TRAJECTORIES]
        shapes = {name: tuple(dset.shape) for name, dset in f["data"].items()}
    flat = states.reshape(-1, states.shape[-1]).astype(np.float64)
    return {
        **attrs,
        "shapes": shapes,
        "state_min": flat.min(axis=0).tolist(),
        "state_max": flat.max(axis=0).tolist(),
        "state_mean": flat.mean(axis=0).tolist(),
        "state_std": flat.std(axis=0).tolist(),
        "contact_active_fraction": (
            float(active_contact_mask(torch.from_numpy(depths), torch.from_numpy(thicknesses)).float().mean())
            if depths.size else None
        ),
    }


def format_summary(summary: dict[str, Any]) -> str:
    """Multi-line text of :func:`summarize_dataset`'s result."""
    lines = [
        f"robot {summary['env_name']} ({summary['solver']}, newton {summary['newton_version']}, "
        f"warp {summary['warp_version']})",
        f"{summary['num_trajectories']} trajectories x {summary['trajectory_length']} steps = "
        f"{summary['num_transitions']} transitions ({summary.get('num_dropped_trajectories', 0)} dropped)",
        f"state dim {summary['state_dim']} (q {summary['dof_q']}, qd {summary['dof_qd']}), "
        f"torques {summary['joint_act_dim']}, contacts {summary['contact_count']}, frame {summary['states_frame']}",
    ]
    if summary["contact_active_fraction"] is not None:
        active = 100 * summary["contact_active_fraction"]
        lines.append(f"active contact candidates (depth < max(4 r, 0.12 m)): {active:.1f} %")
    lines.append("state coordinate        min        max       mean        std")
    columns = (summary["state_min"], summary["state_max"], summary["state_mean"], summary["state_std"])
    for i, values in enumerate(zip(*columns, strict=True)):
        lines.append(f"  {i:>3d}          " + " ".join(f"{v:10.3f}" for v in values))
    return "\n".join(lines)


def plot_dataset(path: str | Path, png: str | Path, num_trajectories: int = 4) -> Path:
    """Write a PNG with per-coordinate state histograms and a few trajectories over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attrs = read_attrs(path)
    with h5py.File(path, "r") as f:
        states = f["data/states"][:MAX_SUMMARY_TRAJECTORIES]
    dim = states.shape[-1]
    cols = min(dim, 6)
    rows = 2 * int(np.ceil(dim / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.4 * rows), squeeze=False)
    time = np.arange(states.shape[1]) * attrs["frame_dt"]
    for i in range(dim):
        r, c = 2 * (i // cols), i % cols
        axes[r][c].hist(states[..., i].ravel(), bins=60, color="tab:blue")
        axes[r][c].set_title(f"state[{i}] histogram", fontsize=8)
        for k in range(min(num_trajectories, states.shape[0])):
            axes[r + 1][c].plot(time, states[k, :, i], lw=0.8)
        axes[r + 1][c].set_title(f"state[{i}] vs time [s]", fontsize=8)
    for ax in axes.ravel()[2 * dim:]:
        ax.axis("off")
    fig.suptitle(f"{attrs['env_name']}: {attrs['num_trajectories']} trajectories")
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return png
