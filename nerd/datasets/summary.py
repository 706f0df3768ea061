"""Human-readable summary and plots of a trajectory dataset."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from nerd.datasets.hdf5 import read_attrs
from nerd.features import active_contact_mask

# Statistics are computed on at most this many trajectories so that a summary of a 10 M-transition file is quick.
MAX_SUMMARY_TRAJECTORIES = 4096


def coordinate_names(attrs: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Names with units of a dataset's state coordinates and joint torques.

    Datasets store them (``state_names``, ``joint_act_names``); for older files they are rebuilt from the robot,
    and plain indices are used when the robot is unknown or its layout differs from the file's.
    """
    states, acts = attrs.get("state_names"), attrs.get("joint_act_names")
    if states is None or acts is None:
        try:
            from nerd.envs import env_class

            robot = env_class(attrs["env_name"])(1)
            states, acts = robot.state_names(), robot.joint_act_names()
        except (KeyError, ValueError):
            states, acts = [], []
    if len(states) != attrs["state_dim"] or len(acts) != attrs["joint_act_dim"]:
        states = [f"state[{i}]" for i in range(attrs["state_dim"])]
        acts = [f"joint_act[{i}]" for i in range(attrs["joint_act_dim"])]
    return list(states), list(acts)


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
    names, _ = coordinate_names(summary)
    width = max(len(n) for n in names) + 2 if names else 18
    lines.append(f"{'state coordinate':<{width}}" + "".join(f"{h:>11}" for h in ("min", "max", "mean", "std")))
    for name, *values in zip(names, summary["state_min"], summary["state_max"], summary["state_mean"],
                             summary["state_std"], strict=False):
        lines.append(f"{name:<{width}}" + "".join(f"{v:11.3f}" for v in values))
    return "\n".join(lines)


def plot_dataset(path: str | Path, png: str | Path, num_trajectories: int = 4) -> Path:
    """Write a PNG of every state coordinate and joint torque: a histogram and a few trajectories over time each,
    titled with the coordinate's name and unit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attrs = read_attrs(path)
    with h5py.File(path, "r") as f:
        states = f["data/states"][:MAX_SUMMARY_TRAJECTORIES]
        torques = f["data/joint_acts"][:MAX_SUMMARY_TRAJECTORIES]
    state_names, torque_names = coordinate_names(attrs)
    panels = [(states[..., i], name, "tab:blue") for i, name in enumerate(state_names)]
    panels += [(torques[..., i], f"torque {name}", "tab:red") for i, name in enumerate(torque_names)]
    cols = min(max(states.shape[-1], torques.shape[-1]), 6)
    state_rows, torque_rows = int(np.ceil(len(state_names) / cols)), int(np.ceil(len(torque_names) / cols))
    rows = 2 * (state_rows + torque_rows)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    time = np.arange(states.shape[1]) * attrs["frame_dt"]
    for p, (values, name, colour) in enumerate(panels):
        # Torques start on a fresh row, below the states.
        slot = p if p < len(state_names) else state_rows * cols + (p - len(state_names))
        r, c = 2 * (slot // cols), slot % cols
        hist, series = axes[r][c], axes[r + 1][c]
        hist.axis("on")
        series.axis("on")
        hist.hist(values.ravel(), bins=60, color=colour)
        hist.set_title(name, fontsize=8)
        hist.set_ylabel("count", fontsize=7)
        for k in range(min(num_trajectories, values.shape[0])):
            series.plot(time, values[k], lw=0.8)
        series.set_xlabel("time [s]", fontsize=7)
        for ax in (hist, series):
            ax.tick_params(labelsize=7)
    fig.suptitle(f"{attrs['env_name']}: {attrs['num_trajectories']} trajectories x {attrs['trajectory_length']} steps "
                 f"(histograms of the first {states.shape[0]}; {min(num_trajectories, states.shape[0])} trajectories "
                 "over time)")
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    tmp = png.with_name(png.name + ".tmp")  # written whole, then renamed: no reader sees half a PNG
    try:
        fig.savefig(tmp, dpi=80, format="png")
        os.replace(tmp, png)
    finally:
        tmp.unlink(missing_ok=True)
        plt.close(fig)
    return png
