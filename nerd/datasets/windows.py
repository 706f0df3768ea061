"""Training windows over a trajectory dataset: every start position of every trajectory.

The HDF5 file is read once, converted to robot-centric model inputs and relative targets
(:mod:`nerd.features`) in chunks, and kept as tensors of shape (num_trajectories, T, width). A window is
``(trajectory, start)``; a batch gathers (B, H, width) slices with one indexing operation.

The parts of one dataset may differ in trajectory length: a part whose trajectories are longer than the first
part's is cut into overlapping pieces of the first part's length (:func:`overlapping_pieces`) that together hold
every window of the long trajectory, so that e.g. 1000-step trajectories from a task's reset train beside the
release's 100-step ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import h5py
import torch

from nerd.datasets.hdf5 import DatasetError, read_attrs
from nerd.features import RobotSignature, build_inputs, build_targets

_CONVERT_CHUNK = 1024  # trajectories converted at a time, to bound the temporary memory of the conversion


def dataset_files(spec: str | Path | Sequence[str | Path]) -> list[Path]:
    """The HDF5 files of a dataset given as one file, a directory (its ``*.hdf5`` files, sorted: the parts
    that sharded generation writes) or a list of files and directories, in that order.

    Raises:
        DatasetError: If a directory holds no ``.hdf5`` file or the list is empty.
    """
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        if path.is_dir():
            files = sorted(path.glob("*.hdf5"))
            if not files:
                raise DatasetError(f"dataset directory {path} holds no .hdf5 files")
            return files
        return [path]
    if not spec:
        raise DatasetError("the dataset list is empty")
    return [file for entry in spec for file in dataset_files(Path(entry))]


def _file_weights(spec: str | Path | Sequence[str | Path], weights: Sequence[float]) -> list[float]:
    """The weight of each file of :func:`dataset_files` ``(spec)``, from one weight per entry of ``spec`` (a
    directory's files share its entry's).

    Raises:
        DatasetError: If the weights are not one positive finite number per entry.
    """
    entries = [spec] if isinstance(spec, (str, Path)) else list(spec)
    if len(weights) != len(entries):
        raise DatasetError(f"{len(weights)} dataset weights for {len(entries)} dataset entries; give one per entry")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise DatasetError(f"dataset weights must be positive and finite, got {list(weights)}")
    return [float(w) for entry, w in zip(entries, weights, strict=True) for _ in dataset_files(Path(entry))]


def piece_starts(length: int, piece: int, history: int) -> list[int]:
    """First steps of the pieces of ``piece`` steps that cover every ``history``-step window of a ``length``-step
    trajectory: consecutive pieces overlap by ``history - 1`` steps, and the last one ends with the trajectory
    (it may repeat a few windows of the one before it)."""
    stride = piece - history + 1
    starts = list(range(0, length - piece + 1, stride))
    if starts[-1] != length - piece:
        starts.append(length - piece)
    return starts


def overlapping_pieces(values: torch.Tensor, piece: int, history: int) -> torch.Tensor:
    """Trajectories (n, T, ...) as (n * pieces, ``piece``, ...): :func:`piece_starts`' pieces, trajectory-major."""
    starts = piece_starts(values.shape[1], piece, history)
    return torch.stack([values[:, s : s + piece] for s in starts], dim=1).flatten(0, 1)


class TrajectoryWindows:
    """All length-``history`` windows of a dataset, as model inputs and targets.

    Args:
        path: HDF5 dataset written by ``generate/generate_dataset.py``: one file, a directory of parts (sharded
            generation) or a list of files, read as one dataset (same robot and trajectory length).
        history: Window length H (the model's history, 10 in the paper).
        device: Where the tensors live (a GPU keeps the whole dataset resident).
        max_trajectories: Use only the first trajectories (for quick runs, counted across the files in order);
            None for all.
        joint_limits: The limits a ``joint_limit_inputs`` model reads (:attr:`RobotSignature.joint_limits`, not
            stored in datasets); the windows then carry the ``joint_limits`` input group.
        joint_limit_lookahead: With ``joint_limits``, also carry the ``joint_limit_lookahead`` group, one frame of
            the dataset (its ``frame_dt``) ahead.
        model_options: The model options (:data:`~nerd.features.MODEL_OPTIONS`: input frame, contact inputs,
            prediction; not stored in datasets) the windows' inputs and targets are built for; None: NeRD's.
        weights: A loss weight per entry of ``path`` given as a list (a directory's files share its entry's), so
            that a small part of the data can count as much as a large one in the loss; None: every window alike.
            They are scaled to a mean of 1 over the windows, so the loss stays on the unweighted loss's scale.
    """

    def __init__(self, path: str | Path | Sequence[str | Path], history: int, device: str | torch.device = "cpu",
                 max_trajectories: int | None = None, joint_limits: tuple[tuple[int, float, float], ...] = (),
                 joint_limit_lookahead: bool = False, model_options: Mapping[str, Any] | None = None,
                 weights: Sequence[float] | None = None):
        files = dataset_files(path)
        file_weights = None if weights is None else _file_weights(path, weights)
        self.path = Path(path) if isinstance(path, (str, Path)) else files[0]
        """The file or directory given (the first file of a list)."""
        self.files = files
        """The dataset's files, in reading order."""
        self.history = history
        inputs: dict[str, list[torch.Tensor]] = {}
        targets: list[torch.Tensor] = []
        remaining = max_trajectories
        length = None
        counts: list[torch.Tensor] = []  # the loss weight of every trajectory read, per file (weighted data only)
        for i, file in enumerate(files):
            attrs = read_attrs(file)
            try:
                signature = replace(RobotSignature.from_dict(attrs), joint_limits=tuple(joint_limits),
                                    joint_limit_lookahead=float(attrs["frame_dt"]) if joint_limit_lookahead else 0.0,
                                    **dict(model_options or {}))
            except KeyError as err:
                raise DatasetError(f"{file} lacks the attribute {err}; it was not written by generate_dataset.py"
                                   ) from err
            if file == files[0]:
                self.signature = signature
                self.frame_dt = float(attrs["frame_dt"])
                """Seconds per transition of the data (the first file's; every part must share it)."""
                length = int(attrs["trajectory_length"])
                if history > length:
                    raise DatasetError(f"{file}: history {history} is longer than its trajectories ({length} steps)")
            else:
                signature.check_compatible(self.signature, what=f"dataset part {file}")
                if not math.isclose(float(attrs["frame_dt"]), self.frame_dt, rel_tol=1e-9):
                    raise DatasetError(f"{file}: frames of {float(attrs['frame_dt']):g} s, but {files[0]} has "
                                       f"{self.frame_dt:g} s; a model learns one frame length")
                if int(attrs["trajectory_length"]) < length:
                    raise DatasetError(f"{file}: trajectories of {attrs['trajectory_length']} steps, shorter than "
                                       f"the {length} of {files[0]}; list the part with the shortest trajectories "
                                       "first")
            if remaining is not None and remaining <= 0:
                break
            chunks = len(targets)
            read = self._read(file, remaining, inputs, targets, length)
            if file_weights is not None:
                counts.append(torch.full((sum(len(t) for t in targets[chunks:]),), file_weights[i]))
            remaining = None if remaining is None else remaining - read
        self.inputs = {name: torch.cat(parts).to(device) for name, parts in inputs.items()}
        self.targets = torch.cat(targets).to(device)
        self.num_trajectories, self.trajectory_length = self.targets.shape[:2]
        # Every trajectory holds the same number of windows, so the mean over trajectories is the mean over windows.
        per_trajectory = torch.cat(counts) if file_weights is not None else None
        self.weights = None if per_trajectory is None else (per_trajectory / per_trajectory.mean()).to(device)
        """Loss weight of each trajectory's windows (num_trajectories,), mean 1; None when unweighted."""
        self.starts_per_trajectory = self.trajectory_length - history + 1
        self._offsets = torch.arange(history, device=device)

    def _read(self, path: Path, max_trajectories: int | None, inputs: dict[str, list[torch.Tensor]],
              targets: list[torch.Tensor], length: int) -> int:
        """Append one file's converted trajectories to ``inputs``/``targets``, cut into pieces of ``length`` steps
        where they are longer; returns how many trajectories of the file were read."""
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
                groups, anchor = build_inputs(self.signature, raw["states"], raw["root_body_q"], raw["joint_acts"],
                                              raw)
                target = build_targets(self.signature, raw["states"], raw["next_states"], anchor)
                if target.shape[1] > length:
                    # Inputs and targets are per step, so cutting after the conversion changes no value.
                    groups = {name: overlapping_pieces(value, length, self.history) for name, value in groups.items()}
                    target = overlapping_pieces(target, length, self.history)
                for name, value in groups.items():
                    inputs.setdefault(name, []).append(value)
                targets.append(target)
        return total

    def input_range(self, groups: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) of every raw input column over the whole dataset, the ``groups`` concatenated in that order
        (a model's token layout); on the CPU."""
        token = torch.cat([self.inputs[name].flatten(0, 1) for name in groups], dim=1)
        return token.amin(dim=0).float().cpu(), token.amax(dim=0).float().cpu()

    def __len__(self) -> int:
        """Number of windows."""
        return self.num_trajectories * self.starts_per_trajectory

    def get_batch(self, window_ids: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Inputs (each (B, H, width)) and targets (B, H, P) of the windows ``window_ids`` (B,)."""
        window_ids = window_ids.to(self._offsets.device)
        traj = (window_ids // self.starts_per_trajectory)[:, None]
        steps = (window_ids % self.starts_per_trajectory)[:, None] + self._offsets
        return {name: value[traj, steps] for name, value in self.inputs.items()}, self.targets[traj, steps]

    def batch_weights(self, window_ids: torch.Tensor) -> torch.Tensor | None:
        """Loss weights (B,) of the windows ``window_ids``; None for an unweighted dataset."""
        if self.weights is None:
            return None
        return self.weights[window_ids.to(self.weights.device) // self.starts_per_trajectory]

    def iterate(self, batch_size: int, generator: torch.Generator, max_batches: int | None = None,
                shard: tuple[int, int] = (0, 1)
                ) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor | None]]:
        """Shuffled batches ``(inputs, targets, weights)`` over all windows (one epoch), or the first
        ``max_batches`` of them; ``weights`` (B,) is None for an unweighted dataset.

        With ``shard = (rank, world_size)`` (distributed training) every process draws the same global batches
        (same generator state) and takes its own ``batch_size // world_size`` windows of each, so the ranks'
        windows never overlap and the schedule does not depend on the number of processes; a last batch that
        does not split evenly is dropped.
        """
        rank, world = shard
        order = torch.randperm(len(self), generator=generator)
        batches = range(0, len(order), batch_size)
        for i, start in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                return
            batch = order[start : start + batch_size]
            if world > 1:
                if len(batch) < batch_size and len(batch) % world:
                    return
                batch = batch[rank::world]
            yield *self.get_batch(batch), self.batch_weights(batch)
