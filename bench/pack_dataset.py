"""Pack a NeRD HDF5 dataset into fewer bytes for a transfer, and unpack it bit for bit.

A lent GPU machine takes a bounded working tree per call (64 MiB, the repository's own 22 MB of it: docs/accuracy.md,
"The look-ahead chain on an H100"). ``pack`` writes every dataset and attribute with gzip (level 9) and the byte
shuffle, and stores ``next_states`` by its last step only: inside a trajectory ``next_states[:, t]`` is
``states[:, t + 1]`` (checked before anything is written), so the rest is the states shifted. ``unpack`` rebuilds
the original layout (lzf, as generation writes it); every array and attribute comes back exactly. The Cartpole's
1 M transitions go from 44 MB (lzf) to 18-19 MB.

Examples (the stop-37 H100 call; the unpacking ran there):
    python bench/pack_dataset.py pack data/Cartpole_logu_tasklong/b_task1000_seed3.hdf5 data/gpu37/packed/b.h5p
    python bench/pack_dataset.py unpack data/gpu37/packed/b.h5p data/gpu37/train/b.hdf5
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import numpy as np

from nerd.cli import check_output, make_parser, run_main
from nerd.errors import UserError

PACKED_MARK = "packed_by"
"""Root attribute of a packed file (its value: this script), removed again by ``unpack``."""
NEXT_STATES = "data/next_states"
NEXT_STATES_LAST = "data/next_states_last"

Transform = Callable[[str, h5py.Dataset], Iterator[tuple[str, np.ndarray]]]


def _packed_arrays(name: str, ds: h5py.Dataset) -> Iterator[tuple[str, np.ndarray]]:
    data = ds[()]
    if name != NEXT_STATES:
        yield name, data
        return
    states = ds.parent["states"][()]
    if states.shape != data.shape or not np.array_equal(states[:, 1:], data[:, :-1]):
        raise UserError(f"{ds.file.filename}: {NEXT_STATES} is not {states.shape} states shifted by one step within "
                        "each trajectory, so it cannot be packed by its last step")
    yield NEXT_STATES_LAST, data[:, -1]


def _unpacked_arrays(name: str, ds: h5py.Dataset) -> Iterator[tuple[str, np.ndarray]]:
    data = ds[()]
    if name == NEXT_STATES_LAST:
        states = ds.parent["states"][()]
        yield NEXT_STATES, np.concatenate([states[:, 1:], data[:, None]], axis=1)
    else:
        yield name, data


def _copy(src: h5py.File, dst: h5py.File, transform: Transform, **compression) -> None:
    """Every group, dataset and attribute of ``src`` into ``dst``, each dataset through ``transform``."""
    dst.attrs.update(src.attrs)

    def visit(name: str, obj: h5py.Group | h5py.Dataset) -> None:
        if isinstance(obj, h5py.Group):
            dst.require_group(name).attrs.update(obj.attrs)
            return
        for out_name, data in transform(name, obj):
            # Empty arrays (a robot without contacts) take no filter: h5py refuses chunking a zero-sized shape.
            out = dst.create_dataset(out_name, data=data, **(compression if data.size else {}))
            out.attrs.update(obj.attrs)

    src.visititems(visit)


def convert(mode: str, src: str | Path, dst: str | Path, overwrite: bool = False) -> Path:
    """``pack`` or ``unpack`` the dataset ``src`` into ``dst``, written whole or not at all."""
    src, dst = Path(src), check_output(dst, overwrite)
    if not src.is_file():
        raise FileNotFoundError(f"dataset not found: {src}")
    try:
        source = h5py.File(src, "r")
    except OSError as err:
        raise UserError(f"{src}: not a readable HDF5 dataset ({err})") from err
    partial = dst.with_name(dst.name + ".partial")
    try:
        with source as s:
            packed = PACKED_MARK in s.attrs
            if mode == "pack" and packed:
                raise UserError(f"{src} is packed already; unpack it first")
            if mode == "unpack" and not packed:
                raise UserError(f"{src} is not a packed dataset (no '{PACKED_MARK}' attribute): nothing to unpack")
            dst.parent.mkdir(parents=True, exist_ok=True)
            with h5py.File(partial, "w") as d:
                if mode == "pack":
                    _copy(s, d, _packed_arrays, compression="gzip", compression_opts=9, shuffle=True)
                    d.attrs[PACKED_MARK] = "bench/pack_dataset.py"
                else:
                    _copy(s, d, _unpacked_arrays, compression="lzf")
                    del d.attrs[PACKED_MARK]
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dst)
    return dst


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("mode", choices=("pack", "unpack"))
    parser.add_argument("src", help="HDF5 dataset to read")
    parser.add_argument("dst", help="file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing dst")
    args = parser.parse_args()
    dst = convert(args.mode, args.src, args.dst, args.overwrite)
    print(f"{args.mode}ed {args.src} ({Path(args.src).stat().st_size / 1e6:.1f} MB) -> {dst} "
          f"({dst.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    run_main(main)
