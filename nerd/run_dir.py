"""Run directories and result files: atomic writes, the record of what produced a run, and clean overwrites."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename, so no reader sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def git_description() -> dict[str, str]:
    """Commit and short status of the code this module runs from (recorded in every run directory)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--short"], cwd=here, capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip(), "status": status.stdout}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "status": ""}


def write_run_record(logdir: str | Path, config: dict[str, Any]) -> None:
    """Write the resolved config (``config.yaml``) and the code's git state (``git.yaml``) into ``logdir``."""
    write_text_atomic(Path(logdir) / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    write_text_atomic(Path(logdir) / "git.yaml", yaml.safe_dump(git_description()))


def clear_run_dir(logdir: str | Path, entries: Iterable[str]) -> None:
    """Remove a previous run's outputs (the named entries and TensorBoard event files) from ``logdir``."""
    logdir = Path(logdir)
    for name in entries:
        path = logdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for events in logdir.glob("events.out.tfevents.*"):
        events.unlink()
