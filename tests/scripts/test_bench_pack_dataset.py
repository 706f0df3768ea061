"""bench/pack_dataset.py: a packed dataset comes back bit for bit; what cannot be packed is refused."""

import shutil

import h5py
import numpy as np
import pytest
import torch

from nerd.datasets.windows import TrajectoryWindows
from nerd.generation import GenerationConfig, generate_dataset
from tests.scripts.test_entry_points import error_lines, run_script

SCRIPT = "bench/pack_dataset.py"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("pack") / "train.hdf5"
    generate_dataset(GenerationConfig("Cartpole", 600, trajectory_length=30, num_envs=20, seed=0), path,
                     progress=False)
    return path


def contents(path):
    """Every group's and dataset's attributes and every array, by name."""
    with h5py.File(path, "r") as f:
        items = {"/": (dict(f.attrs), None)}
        f.visititems(lambda name, obj: items.__setitem__(
            name, (dict(obj.attrs), obj[()] if isinstance(obj, h5py.Dataset) else None)))
    return items


def run(monkeypatch, capsys, *args):
    return run_script(SCRIPT, *map(str, args), monkeypatch=monkeypatch, capsys=capsys)


def test_pack_then_unpack_restores_every_array_and_attribute(dataset, tmp_path, monkeypatch, capsys):
    packed, unpacked = tmp_path / "train.h5p", tmp_path / "back/train.hdf5"
    assert run(monkeypatch, capsys, "pack", dataset, packed)[0] == 0
    with h5py.File(packed, "r") as f:
        assert "next_states" not in f["data"] and f["data/next_states_last"].shape == (20, 4)
    assert packed.stat().st_size < 0.75 * dataset.stat().st_size
    code, out, err = run(monkeypatch, capsys, "unpack", packed, unpacked)
    assert code == 0, err
    original, restored = contents(dataset), contents(unpacked)
    assert original.keys() == restored.keys()
    for name, (attrs, data) in original.items():
        back_attrs, back_data = restored[name]
        assert attrs.keys() == back_attrs.keys(), name
        for key, value in attrs.items():
            assert np.array_equal(value, back_attrs[key]), (name, key)
        if data is not None:
            assert data.dtype == back_data.dtype and np.array_equal(data, back_data), name
    # The training windows read from it are the original's.
    a, b = TrajectoryWindows(dataset, 10), TrajectoryWindows(unpacked, 10)
    assert torch.equal(a.targets, b.targets) and all(torch.equal(a.inputs[k], b.inputs[k]) for k in a.inputs)


def test_what_cannot_be_packed_or_unpacked_is_a_one_line_error_and_no_file(dataset, tmp_path, monkeypatch, capsys):
    # next_states that is not the states shifted (edited here) cannot be stored by its last step.
    edited = tmp_path / "edited.hdf5"
    shutil.copy(dataset, edited)
    with h5py.File(edited, "r+") as f:
        f["data/next_states"][0, 3, 1] += 1.0
    code, _, err = run(monkeypatch, capsys, "pack", edited, tmp_path / "edited.h5p")
    assert code == 1 and "data/next_states is not (20, 30, 4) states shifted by one step" in error_lines(err)[0]
    assert not list(tmp_path.glob("edited.h5p*"))
    # Unpacking a file that was never packed, packing twice, a corrupt file, an existing output.
    code, _, err = run(monkeypatch, capsys, "unpack", dataset, tmp_path / "out.hdf5")
    assert code == 1 and "is not a packed dataset" in error_lines(err)[0]
    assert run(monkeypatch, capsys, "pack", dataset, tmp_path / "p.h5p")[0] == 0
    code, _, err = run(monkeypatch, capsys, "pack", tmp_path / "p.h5p", tmp_path / "pp.h5p")
    assert code == 1 and "is packed already" in error_lines(err)[0]
    (tmp_path / "corrupt.hdf5").write_bytes(b"not hdf5")
    code, _, err = run(monkeypatch, capsys, "pack", tmp_path / "corrupt.hdf5", tmp_path / "c.h5p")
    assert code == 1 and "not a readable HDF5 dataset" in error_lines(err)[0]
    code, _, err = run(monkeypatch, capsys, "pack", dataset, tmp_path / "p.h5p")
    assert code == 1 and "already exists; pass --overwrite" in error_lines(err)[0]
    assert not list(tmp_path.glob("*.partial"))
