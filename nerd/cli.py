"""Shared command-line plumbing: common flags and the one-line error contract of every entry point."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path


from nerd.config import ConfigError
from nerd.datasets.hdf5 import DatasetError
from nerd.errors import RolloutDivergedError, first_line

# Errors caused by the user's input or a failed run, reported as one line; anything else is a bug and keeps
# its traceback. (ConfigError and DatasetError are ValueErrors; FileNotFoundError/FileExistsError are OSErrors.)
USER_ERRORS = (ValueError, OSError, ConfigError, DatasetError, RolloutDivergedError)


def add_common_args(parser: argparse.ArgumentParser, seed_default: int | None = 0) -> None:
    """Add ``--device``, ``--overwrite`` and, unless ``seed_default`` is None, ``--seed``."""
    parser.add_argument("--device", default="cpu", help="'cpu', 'cuda' or 'cuda:N' (default: cpu)")
    if seed_default is not None:
        parser.add_argument("--seed", type=int, default=seed_default, help=f"random seed (default: {seed_default})")
    parser.add_argument("--overwrite", action="store_true", help="replace existing outputs")


def add_mass_matrix_refresh_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--mass-matrix-refresh {frame,substep}``: when the ground truth rebuilds Featherstone's mass matrix."""
    from envs.environment import MASS_MATRIX_REFRESH

    parser.add_argument("--mass-matrix-refresh", choices=MASS_MATRIX_REFRESH, default=None,
                        help="ground truth: rebuild Featherstone's mass matrix once per 'frame' (the release's "
                             "setting, the default) or every 'substep' (Newton's default, more accurate)")


def add_overrides_arg(parser: argparse.ArgumentParser, example: str) -> None:
    """Add ``--cfg-overrides KEY=VALUE ...`` (applied to the YAML before validation; ``example`` shows the form)."""
    parser.add_argument("--cfg-overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help=f"config overrides, e.g. {example}")


def resolve_device(device: str) -> str:
    """Validate a device string; 'cuda' without a GPU is a clear error instead of a deep failure."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available; use --device cpu")
        return "cuda:0" if device == "cuda" else device
    if device != "cpu":
        raise ValueError(f"--device must be 'cpu', 'cuda' or 'cuda:N', got '{device}'")
    return device


def check_output(path: str | Path, overwrite: bool) -> Path:
    """Refuse to replace an existing output unless ``--overwrite`` was given."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass --overwrite to replace it")
    return path


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM."""


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated()


def run_main(main: Callable[[], None]) -> None:
    """Run an entry point: user errors become one line on stderr and exit code 1; Ctrl-C exits 130.

    Warp's start-up banner and per-module load messages are silenced unless ``NERD_VERBOSE_WARP=1``.
    """
    import os

    import warp

    if os.environ.get("NERD_VERBOSE_WARP", "0") != "1":
        warp.config.log_level = warp.LOG_WARNING
    # SIGTERM (kill, a scheduler's time-out) unwinds like Ctrl-C, so partial outputs are cleaned up the same way.
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        main()
    except Terminated:
        print("terminated", file=sys.stderr)
        sys.exit(143)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except USER_ERRORS as err:
        print(f"error: {first_line(err)}", file=sys.stderr)
        sys.exit(1)


__all__ = ["add_common_args", "add_mass_matrix_refresh_arg", "check_output", "resolve_device", "run_main"]
