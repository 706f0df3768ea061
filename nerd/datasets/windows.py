"""Training windows over a trajectory dataset: every start position of every trajectory (spec §7).

The HDF5 file is read once, converted to robot-centric model inputs and relative targets
(:mod:`nerd.features`) in chunks, and kept as tensors of shape (num_trajectories, T, width). A window is
``(trajectory, start)``; a batch gathers (B, H, width) slices with one indexing operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import h5py
import torch

from nerd.datasets.hdf5 import DatasetError, read_attrs
from nerd.features import RobotSignature, build_inputs, build_targets

_CONVERT_CHUNK = 1024  # trajectories converted at a time, to bound the temporary memory of the conversion


class TrajectoryWindows:
    """All length-``history`` windows of a dataset, as model inputs and targets.

    Args:
        path: HDF5 dataset written by ``generate/generate_dataset.py``.
        history: Window length H (the model's history, 10 in the paper).
        device: Where the tensors live (a GPU keeps the whole dataset resident).
        max_trajectories: Use only the first trajectories (for quick runs); None for all.
    """

    def __init__(self, path: str | Path, history: int, device: str | torch.device = "cpu",
                 max_trajectories: int | None = None):
        attrs = read_attrs(path)
        self.path = Path(path)
        try:
            self.signature = RobotSignature.from_dict(attrs)
        except KeyError as err:
            raise DatasetError(f"{path} lacks the attribute {err}; it was not written by generate_dataset.py") from err
        self.history = history
        length = int(attrs["trajectory_length"])
        if history > length:
            raise DatasetError(f"{path}: history {history} is longer than its trajectories ({length} steps)")
        inputs: dict[str, list[torch.Tensor]] = {}
        targets = []
        with h5py.File(path, "r") as f:
            data = f["data"]
            available = data["states"].shape[0]
            total = available if max_trajectories is None else min(max_trajectories, available)
            if total == 0:
                raise DatasetError(f"{path} holds no trajectories")
            for start in range(0, total, _CONVERT_CHUNK):
                stop = min(start + _CONVERT_CHUNK, total)
                raw = {name: torch.from_numpy(data[name][start:stop]) for name in data}
                for name, values in raw.items():
                    bad = int((~torch.isfinite(values)).sum())
                    if bad:
                        raise DatasetError(f"{path}: field '{name}' holds {bad} non-finite values "
                                           f"(trajectories {start}..{stop - 1}); regenerate the dataset")
                groups, anchor = build_inputs(self.signature, raw["states"], raw["root_body_q"], raw["joint_acts"], raw)
                for name, value in groups.items():
                    inputs.setdefault(name, []).append(value)
                targets.append(build_targets(self.signature, raw["states"], raw["next_states"], anchor))
        self.inputs = {name: torch.cat(parts).to(device) for name, parts in inputs.items()}
        self.targets = torch.cat(targets).to(device)
        self.num_trajectories, self.trajectory_length = self.targets.shape[:2]
        self.starts_per_trajectory = self.trajectory_length - history + 1
        self._offsets = torch.arange(history, device=device)

    def __len__(self) -> int:
        """Number of windows."""
        return self.num_trajectories * self.starts_per_trajectory

    def get_batch(self, window_ids: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Inputs (each (B, H, width)) and targets (B, H, P) of the windows ``window_ids`` (B,)."""
        window_ids = window_ids.to(self._offsets.device)
        traj = (window_ids // self.starts_per_trajectory)[:, None]
        steps = (window_ids % self.starts_per_trajectory)[:, None] + self._offsets
        return {name: value[traj, steps] for name, value in self.inputs.items()}, self.targets[traj, steps]

    def iterate(self, batch_size: int, generator: torch.Generator, max_batches: int | None = None
                ) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        """Shuffled batches over all windows (one epoch), or the first ``max_batches`` of them."""
        order = torch.randperm(len(self), generator=generator)
        batches = range(0, len(order), batch_size)
        for i, start in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                return
            yield self.get_batch(order[start : start + batch_size])
