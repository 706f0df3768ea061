"""Trajectory datasets in HDF5: an incremental, crash-safe writer and a validating reader.

Layout (trajectory-major, float32): group ``data`` holds one dataset per field with shape
(num_trajectories, T, *field_shape); attributes on the file describe the robot, the engine versions, the
dimensions, the counts, the generator settings and the seed. The writer appends whole batches of
trajectories to chunked, resizable datasets (memory does not grow with the dataset) and works on
``<name>.partial``; only a finished run is renamed to the final name and marked ``complete``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from nerd.errors import UserError
from nerd.resources import format_bytes
from nerd.run_dir import ExclusiveLock, publish

TRAJECTORY_FIELDS = (
    "states",
    "next_states",
    "joint_acts",
    "contact_normals",
    "contact_points_0",
    "contact_points_1",
    "contact_depths",
    "contact_thicknesses",
    "gravity_dir",
    "root_body_q",
)
"""Per-step fields of a trajectory dataset, in file order."""
REQUIRED_ATTRS = ("env_name", "state_dim", "joint_act_dim", "trajectory_length", "frame_dt")
"""File attributes every reader relies on (checked by :func:`read_attrs`)."""


class DatasetError(UserError):
    """A dataset file is missing, incomplete, corrupt or does not match what was asked for."""


DISK_SLACK = 1 << 20
"""Bytes kept free beyond twice a batch's raw size when appending (HDF5's own metadata and chunk overhead)."""


class TrajectoryWriter:
    """Appends batches of trajectories to an HDF5 file, publishing it only when closed successfully.

    Args:
        path: Final file path; work happens in ``path + ".partial"``.
        field_shapes: Per-step shape of each field, e.g. ``{"states": (4,), "contact_normals": (4, 3)}``.
            Fields with a zero-sized dimension (a robot without contacts) are stored empty.
        trajectory_length: Steps T per trajectory.
        attrs: File attributes (plain types; dicts and lists are stored as JSON strings).
        compression: h5py compression filter (``"lzf"`` is fast; ``None`` to disable).
        overwrite: Replace a file at ``path``; otherwise one that exists when the writer starts, or appears before
            it finishes, is an error (and stays as it was).
    """

    def __init__(self, path: str | Path, field_shapes: dict[str, tuple[int, ...]], trajectory_length: int,
                 attrs: dict[str, Any], compression: str | None = "lzf", overwrite: bool = False):
        self.path = Path(path)
        self.overwrite = overwrite
        self.partial_path = self.path.with_name(self.path.name + ".partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The lock is taken before the partial file is opened: a second writer of the same output must fail
        # without truncating the first one's work.
        self._lock = ExclusiveLock(self.path.with_name(self.path.name + ".lock"),
                                   f"another process is writing {self.path}; wait for it or choose another output",
                                   DatasetError)
        if self.path.exists() and not overwrite:
            self._lock.release()
            raise DatasetError(f"{self.path} already exists; pass --overwrite to replace it")
        try:
            self._file = h5py.File(self.partial_path, "w")
        except BaseException:
            self._lock.release()
            raise
        self.num_trajectories = 0
        self.trajectory_length = trajectory_length
        group = self._file.create_group("data")
        # Zero-width fields (a robot without contacts) cannot be chunked; they are created at their final size.
        self._empty_fields = {name: shape for name, shape in field_shapes.items() if 0 in shape}
        for name, shape in field_shapes.items():
            if name in self._empty_fields:
                continue
            full = (0, trajectory_length, *shape)
            # Chunks of a few trajectories keep appends cheap and reads of whole trajectories contiguous.
            per_traj = int(np.prod(full[1:])) * 4
            rows = max(1, min(256, (1 << 20) // per_traj))
            group.create_dataset(
                name, shape=full, maxshape=(None, *full[1:]), dtype=np.float32,
                chunks=(rows, *full[1:]), compression=compression,
            )
        for key, value in attrs.items():
            self._file.attrs[key] = json.dumps(value) if isinstance(value, (dict, list, tuple)) else value
        self._file.attrs["complete"] = False

    def append(self, batch: dict[str, np.ndarray]) -> None:
        """Append trajectories: each field (n, T, *field_shape).

        Raises:
            DatasetError: If the disk may not hold the batch (checked before writing: HDF5 does not recover from a
                full disk, and can crash the process).
        """
        needed = 2 * sum(np.asarray(values).nbytes for values in batch.values()) + DISK_SLACK
        free = shutil.disk_usage(self.partial_path.parent).free
        if free < needed:
            raise DatasetError(f"the disk holding {self.path} is nearly full ({format_bytes(free)} free, "
                               f"{format_bytes(needed)} wanted for the next batch); free some space and generate "
                               "again")
        n = None
        for name, dset in self._file["data"].items():
            values = batch[name]
            if n is None:
                n = values.shape[0]
            if values.shape != (n, *dset.shape[1:]):
                raise ValueError(f"field '{name}': expected shape ({n}, {', '.join(map(str, dset.shape[1:]))}), "
                                 f"got {values.shape}")
            dset.resize(self.num_trajectories + n, axis=0)
            dset[self.num_trajectories:] = values
        self.num_trajectories += n or 0

    def close(self, extra_attrs: dict[str, Any] | None = None) -> Path:
        """Finish the file: write the counts, mark it complete and move it to its final name."""
        for name, shape in self._empty_fields.items():
            self._file["data"].create_dataset(
                name, shape=(self.num_trajectories, self.trajectory_length, *shape), dtype=np.float32
            )
        self._file.attrs["num_trajectories"] = self.num_trajectories
        self._file.attrs["num_transitions"] = self.num_trajectories * self.trajectory_length
        for key, value in (extra_attrs or {}).items():
            self._file.attrs[key] = json.dumps(value) if isinstance(value, (dict, list, tuple)) else value
        self._file.attrs["complete"] = True
        self._file.close()
        # Decided under the lock, at the moment of publishing: a file that appeared at the final name while this
        # one was written (a second generation that checked before the first had finished) is never replaced.
        try:
            publish(self.partial_path, self.path, self.overwrite)
        except FileExistsError as err:
            raise DatasetError(str(err)) from None
        self._lock.release()
        return self.path

    def abort(self) -> None:
        """Close and delete the partial file (after an error or an interruption)."""
        try:
            self._file.close()
        except (OSError, RuntimeError):
            pass  # a file that cannot be finished (a full disk) is deleted all the same
        finally:
            self.partial_path.unlink(missing_ok=True)
            self._lock.release()


def read_attrs(path: str | Path) -> dict[str, Any]:
    """Attributes of a complete dataset file (JSON-encoded values decoded).

    Raises:
        DatasetError: If the file is missing, not HDF5, or was not completed.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset not found: {path}")
    try:
        with h5py.File(path, "r") as f:
            attrs = {key: _decode(value) for key, value in f.attrs.items()}
            data = f.get("data", {})
            missing = [name for name in TRAJECTORY_FIELDS if name not in data]
            shapes = {name: tuple(data[name].shape) for name in TRAJECTORY_FIELDS if name in data}
    except OSError as err:
        raise DatasetError(f"{path} is not a readable HDF5 file ({err})") from err
    if not attrs.get("complete", False):
        raise DatasetError(f"{path} is incomplete (its generation did not finish); generate it again")
    if missing:
        raise DatasetError(f"{path} lacks the fields {', '.join(missing)}; it is not a nerd trajectory dataset")
    absent = [key for key in REQUIRED_ATTRS if key not in attrs]
    if absent:
        raise DatasetError(f"{path} lacks the attributes {', '.join(absent)}; it was not written by "
                           "generate_dataset.py")
    _check_shapes(path, shapes, attrs)
    return attrs


def _check_shapes(path: Path, shapes: dict[str, tuple[int, ...]], attrs: dict[str, Any]) -> None:
    """Every field holds (num_trajectories, trajectory_length, ...) with the attributes' state and torque widths."""
    expected = {"states": attrs["state_dim"], "next_states": attrs["state_dim"], "joint_acts": attrs["joint_act_dim"]}
    n, length = shapes["states"][0], int(attrs["trajectory_length"])
    for name, shape in shapes.items():
        if len(shape) < 2 or shape[0] != n or shape[1] != length:
            raise DatasetError(f"{path}: field '{name}' has shape {shape}, but 'states' holds {n} trajectories of "
                               f"{length} steps; the file is damaged, generate it again")
        if name in expected and shape[-1] != expected[name]:
            raise DatasetError(f"{path}: field '{name}' is {shape[-1]} wide, the attributes say {expected[name]}; "
                               "the file is damaged, generate it again")


def load_trajectories(path: str | Path, fields: tuple[str, ...] = TRAJECTORY_FIELDS,
                      start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
    """Read trajectories [start, stop) of the given fields: each (n, T, *field_shape) float32."""
    read_attrs(path)
    with h5py.File(path, "r") as f:
        return {name: f["data"][name][start:stop] for name in fields}


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, np.generic):
        return value.item()
    return value
