"""Shared command-line plumbing: common flags and the one-line error contract of every entry point.

Every entry point parses its arguments and checks the simple ones (names, paths, combinations of flags) before it
imports the engine (Warp, Newton, torch): ``--help`` and input errors come back in well under two seconds. This
module and :mod:`nerd.modes` import nothing heavy for that reason; an entry point calls :func:`quiet_warp` and
imports the library modules that run the work after its checks.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nerd.errors import RolloutDivergedError, UserError, first_line
from nerd.modes import MASS_MATRIX_REFRESH
from nerd.run_dir import write_text_atomic

# Errors caused by the user's input, the file system or a failed run, reported as one line; anything else, a
# plain ValueError included, is a bug and keeps its traceback. ConfigError and DatasetError are UserErrors;
# FileNotFoundError and FileExistsError are OSErrors.
USER_ERRORS = (UserError, OSError, RolloutDivergedError)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Keeps the module docstring's examples as written and shows every option's default.

    Defaults that say nothing (None, False of a flag) are left out, and so is a default the help text already
    explains.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if action.default is None or action.default is False or "default" in help_text or action.default == []:
            return help_text
        return super()._get_help_string(action)


def make_parser(description: str | None) -> argparse.ArgumentParser:
    """An argument parser for an entry point: its docstring as description, defaults shown in ``--help``."""
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter)


def add_common_args(parser: argparse.ArgumentParser, seed_default: int | None = 0) -> None:
    """Add ``--device``, ``--overwrite`` and, unless ``seed_default`` is None, ``--seed``."""
    parser.add_argument("--device", default="cpu", help="'cpu', 'cuda' or 'cuda:N'")
    if seed_default is not None:
        parser.add_argument("--seed", type=int, default=seed_default, help="random seed")
    parser.add_argument("--overwrite", action="store_true", help="replace existing outputs")


def add_mass_matrix_refresh_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--mass-matrix-refresh {frame,substep}``: when the ground truth rebuilds Featherstone's mass matrix."""
    parser.add_argument("--mass-matrix-refresh", choices=MASS_MATRIX_REFRESH, default=None,
                        help="ground truth: rebuild Featherstone's mass matrix once per 'frame' (the release's "
                             "setting for most robots) or every 'substep' (Newton's default, more accurate; the "
                             "release's for CubeToss); default: the robot's own")


def add_robot_variant_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--robot-variant NAME``: the variant of robots that define several (Anymal, CubeToss)."""
    parser.add_argument("--robot-variant", default=None,
                        help="variant of robots that have several: Anymal 'physical' (default: joints and bodies "
                             "aligned) or 'release' (the release's scrambled mass matrix); CubeToss "
                             "'sim' (default: the release's contact) or 'real' (a mismatched contact standing in for "
                             "real tosses)")


def add_control_mode_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--control-mode NAME``: the controller of robots that offer several (Anymal, Franka)."""
    parser.add_argument("--control-mode", default=None,
                        help="controller of robots that have several: Franka 'torque' (default) or 'position' (the "
                             "release's joint-position PD); Anymal 'position' (default) or 'torque'")


def add_overrides_arg(parser: argparse.ArgumentParser, example: str) -> None:
    """Add ``--cfg-overrides KEY=VALUE ...`` (applied to the YAML before validation; ``example`` shows the form)."""
    parser.add_argument("--cfg-overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help=f"config overrides, e.g. {example}")


VIEWER_KINDS = ("gl", "usd", "file", "null")
"""Newton viewers that ``--viewer`` offers (see :mod:`nerd.viewer`)."""


def add_viewer_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--viewer``, ``--output-path``, ``--video`` and ``--video-size`` to an entry point."""
    group = parser.add_argument_group("viewing (ground truth blue, NeRD orange, from the same initial state)")
    group.add_argument("--viewer", choices=VIEWER_KINDS, default=None,
                       help="show one rollout in a Newton viewer: gl (window), usd/file (--output-path), null")
    group.add_argument("--output-path", default=None, help="file written by --viewer usd (.usd) or file (.json/.bin)")
    group.add_argument("--video", default=None, metavar="PATH",
                       help="record one rollout off-screen to PATH (.gif; .mp4 needs ffmpeg)")
    group.add_argument("--video-size", type=int, nargs=2, default=[480, 270], metavar=("WIDTH", "HEIGHT"),
                       help="video frame size in pixels")


def viewing_requested(args: argparse.Namespace) -> bool:
    """True when the command line asks for a viewer or a video."""
    return args.viewer is not None or args.video is not None


USD_MISSING = "--viewer usd needs OpenUSD: pip install usd-core (or the viewer extra: pip install -e '.[viewer]')"
"""The one-line error of ``--viewer usd`` without the ``usd-core`` package (it is not in requirements.txt)."""


NO_DISPLAY = ("--viewer gl needs a display; on a headless machine use --video outputs/rollout.gif or "
              "--viewer usd")
"""The one-line error of ``--viewer gl`` without a display."""


def display_available() -> bool:
    """Whether a window can open: a display on Linux (X11 or Wayland); assumed elsewhere."""
    return os.name != "posix" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def check_viewer_args(args: argparse.Namespace) -> None:
    """Refuse inconsistent viewer flags, missing optional packages and existing outputs before any simulation runs."""
    if args.viewer is not None and args.video is not None:
        raise UserError("--viewer and --video are alternatives; choose one")
    if args.viewer in ("usd", "file"):
        if args.output_path is None:
            raise UserError(f"--viewer {args.viewer} needs --output-path")
        check_output(args.output_path, args.overwrite)
    elif args.output_path is not None:
        raise UserError("--output-path is written by --viewer usd or --viewer file only")
    if args.viewer == "usd" and importlib.util.find_spec("pxr") is None:
        raise UserError(USD_MISSING)
    if args.viewer == "gl" and not display_available():
        raise UserError(NO_DISPLAY)
    if args.video is not None:
        if Path(args.video).suffix.lower() not in (".gif", ".mp4"):
            raise UserError(f"--video must end in .gif or .mp4, got '{args.video}'")
        if Path(args.video).suffix.lower() == ".mp4" and shutil.which("ffmpeg") is None:
            raise UserError("--video .mp4 needs the ffmpeg program (apt-get install ffmpeg); .gif works without it")
        if min(args.video_size) < 16:
            raise UserError("--video-size must be at least 16 x 16 pixels")
        check_output(args.video, args.overwrite)


def quiet_warp() -> None:
    """Silence Warp's start-up banner and per-module load messages unless ``NERD_VERBOSE_WARP=1``.

    Entry points call it after their argument checks, before anything initialises Warp (importing Warp alone takes
    most of a second, which ``--help`` and input errors do not wait for).
    """
    try:
        import warp
    except ImportError:  # training and the models need torch alone (a GPU machine without Warp, say)
        return
    if os.environ.get("NERD_VERBOSE_WARP", "0") != "1":
        warp.config.log_level = warp.LOG_WARNING


def resolve_device(device: str) -> str:
    """Validate a device string; 'cuda' without a GPU is a clear error instead of a deep failure."""
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: no CUDA device is available; use --device cpu")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise UserError(f"--device {device}: no such CUDA device ({torch.cuda.device_count()} present)")
        return "cuda:0" if device == "cuda" else device
    if device != "cpu":
        raise UserError(f"--device must be 'cpu', 'cuda' or 'cuda:N', got '{device}'")
    return device


def check_output(path: str | Path, overwrite: bool) -> Path:
    """Refuse to replace an existing output unless ``--overwrite`` was given."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass --overwrite to replace it")
    return path


def check_json_output(path: str | Path, overwrite: bool, sibling_suffix: str | None) -> tuple[Path, Path | None]:
    """Check a ``--output`` results JSON and the file written beside it (``sibling_suffix``, e.g. ``.png``).

    The path must end in ``.json``, so that the sibling (same name, other suffix) can never be the same file;
    neither may exist without ``--overwrite``. Returns (JSON path, sibling path or None).
    """
    path = Path(path)
    if path.suffix.lower() != ".json":
        beside = f" (the {sibling_suffix} file is written beside it)" if sibling_suffix else ""
        raise UserError(f"--output {path}: give a .json path{beside}")
    sibling = path.with_suffix(sibling_suffix) if sibling_suffix else None
    for target in (path, sibling):
        if target is not None:
            check_output(target, overwrite)
    return path, sibling


def check_report_outputs(path: str | Path, overwrite: bool, plot: bool) -> tuple[Path, Path | None]:
    """Check a benchmark report's ``--output`` JSON, the Markdown table beside it and, with ``plot``, its PNG.

    Returns (JSON path, PNG path or None); see :func:`check_json_output`.
    """
    output, png = check_json_output(path, overwrite, ".png" if plot else None)
    check_output(output.with_suffix(".md"), overwrite)
    return output, png


def write_report(output: Path, results: dict, table: str, overwrite: bool = True) -> None:
    """Print a benchmark's Markdown table and write it and the results JSON (each file whole or not at all; without
    ``overwrite`` never over a file another process wrote meanwhile)."""
    print(table)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, json.dumps(results, indent=1), overwrite)
    write_text_atomic(output.with_suffix(".md"), table + "\n", overwrite)


def write_study_report(args: argparse.Namespace, run: Callable[[argparse.Namespace], dict],
                       table: Callable[[dict], str], plot: Callable[[dict], Any]) -> None:
    """A study's work behind its ``--output`` JSON and ``--overwrite``: refuse existing outputs before anything
    runs, run ``run(args)``, then write the PNG of the matplotlib figure ``plot(report)``, the JSON and the
    Markdown ``table`` beside it."""
    json_path, png_path = check_report_outputs(args.output, args.overwrite, plot=True)
    quiet_warp()
    report = run(args)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plot(report)
    figure.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, dpi=100)
    plt.close(figure)
    write_report(json_path, report, table(report), args.overwrite)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread on SIGTERM."""


_STOP_SIGNAL: list[int] = []
"""The signal (SIGTERM or SIGINT) that asked this process to stop, once one has."""


def _raise_stop(signum: int, frame) -> None:
    # An exception raised while a finalizer (__del__) or a C callback runs is printed and swallowed by Python, and
    # the run would go on. So re-deliver every second until it propagates; not while it is already being handled
    # (clean-up code in an ``except`` block must not be interrupted by a second one).
    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return
    if not _STOP_SIGNAL:
        _STOP_SIGNAL.append(signum)
        signal.signal(signal.SIGALRM, _raise_stop)
        signal.setitimer(signal.ITIMER_REAL, 1.0, 1.0)
    raise Terminated() if _STOP_SIGNAL[0] == signal.SIGTERM else KeyboardInterrupt()


def _quiet_swallowed_stop(unraisable) -> None:
    # A stop swallowed in a finalizer is re-delivered (see _raise_stop): no traceback for it.
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def run_main(main: Callable[[], None]) -> None:
    """Run an entry point: user errors become one line on stderr and exit code 1; Ctrl-C exits 130, SIGTERM 143.

    Imports nothing itself: ``main`` parses its arguments first and calls :func:`quiet_warp` before the engine runs.
    """
    # SIGTERM (kill, a scheduler's time-out) unwinds like Ctrl-C, so partial outputs are cleaned up the same way;
    # both are re-delivered until they reach this function, and whatever a library raises while the process
    # unwinds from one of them (a half-drawn figure's error) still ends it as that stop.
    _STOP_SIGNAL.clear()
    previous = {signum: signal.signal(signum, _raise_stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    sys.unraisablehook = _quiet_swallowed_stop
    try:
        main()
    except BaseException as err:
        if _STOP_SIGNAL or isinstance(err, KeyboardInterrupt):
            signal.setitimer(signal.ITIMER_REAL, 0)
            terminated = (_STOP_SIGNAL[0] if _STOP_SIGNAL else None) == signal.SIGTERM
            print("terminated" if terminated else "interrupted", file=sys.stderr)
            sys.exit(143 if terminated else 130)
        if isinstance(err, USER_ERRORS):
            print(f"error: {first_line(err)}", file=sys.stderr)
            sys.exit(1)
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["VIEWER_KINDS", "HelpFormatter", "add_common_args", "add_control_mode_arg", "add_mass_matrix_refresh_arg",
           "add_overrides_arg", "add_robot_variant_arg", "add_viewer_args", "check_json_output", "check_output",
           "check_viewer_args", "make_parser", "quiet_warp", "resolve_device", "run_main", "viewing_requested"]
