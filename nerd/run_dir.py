"""Run directories and result files: atomic writes, the record of what produced a run, and clean overwrites."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from nerd.errors import UserError

PREVIOUS_RUN = ".previous_run"
"""Where :func:`new_run_dir` keeps a replaced run until the new one has started (inside the run directory)."""


def write_text_atomic(path: str | Path, text: str, overwrite: bool = True) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename, so no reader sees half a file.

    With ``overwrite=False`` the file is published only if ``path`` still does not exist at that moment (a hard
    link, which fails on an existing name): a result that another process wrote meanwhile is never replaced.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        publish(tmp, path, overwrite)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def publish(source: str | Path, path: str | Path, overwrite: bool) -> None:
    """Move the finished file ``source`` to ``path``; without ``overwrite`` only if ``path`` does not exist then.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False (``source`` is left in place).
    """
    if overwrite:
        os.replace(source, path)
        return
    try:
        os.link(source, path)
    except FileExistsError:
        raise FileExistsError(f"{path} was written by another process while this one ran; nothing was replaced "
                              "(pass --overwrite to replace it)") from None
    os.unlink(source)


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


def run_entries(logdir: str | Path, entries: Iterable[str]) -> list[Path]:
    """The outputs of a previous run present in ``logdir``: the named entries and TensorBoard event files."""
    logdir = Path(logdir)
    found = [logdir / name for name in entries if (logdir / name).exists()]
    return found + sorted(logdir.glob("events.out.tfevents.*"))


def check_run_dir(logdir: str | Path, entries: Iterable[str], overwrite: bool) -> None:
    """Refuse a ``logdir`` that holds a previous run unless ``overwrite`` (``--overwrite``) was given."""
    if run_entries(logdir, entries) and not overwrite:
        raise FileExistsError(f"{logdir} holds a run; pass --overwrite to replace it")


@contextmanager
def new_run_dir(logdir: str | Path, entries: Iterable[str], overwrite: bool, checkpoints: str = "nn/*"
                ) -> Iterator[Path]:
    """Give a new run the directory ``logdir``, keeping a previous run until the new one has started.

    Call it once every input has been validated. A previous run's outputs (``entries`` and TensorBoard events;
    refused unless ``overwrite``) are moved aside into ``logdir/.previous_run``. If the block fails before the
    new run wrote a file matching ``checkpoints``, what it wrote is removed, the previous run is put back and a
    directory created here is removed again, so a failed start leaves no run of ``config.yaml`` only and loses
    nothing. When the block ends, or fails after the new run wrote a checkpoint, the previous run is deleted.
    """
    logdir = Path(logdir)
    entries = tuple(entries)
    aside = logdir / PREVIOUS_RUN
    recover_previous_run(logdir, entries, checkpoints)
    check_run_dir(logdir, entries, overwrite)
    created = not logdir.exists()
    logdir.mkdir(parents=True, exist_ok=True)
    previous = run_entries(logdir, entries)
    if previous:
        aside.mkdir()
        for path in previous:
            os.replace(path, aside / path.name)
    try:
        yield logdir
    except BaseException:
        if not any(logdir.glob(checkpoints)):
            clear_run_dir(logdir, entries)
            if previous:
                _restore(aside, logdir)
            if created and not any(logdir.iterdir()):
                logdir.rmdir()
        elif aside.exists():
            shutil.rmtree(aside)
        raise
    if aside.exists():
        shutil.rmtree(aside)


def recover_previous_run(logdir: str | Path, entries: Iterable[str], checkpoints: str) -> bool:
    """Settle a ``logdir/.previous_run`` left by a replacing run that was killed (-9) inside :func:`new_run_dir`:
    if the new run never wrote a ``checkpoints`` file, its outputs are removed and the previous run is put back
    (returns True); otherwise the new run has taken over and the previous one is deleted."""
    logdir = Path(logdir)
    aside = logdir / PREVIOUS_RUN
    if not aside.exists():
        return False
    if any(logdir.glob(checkpoints)):
        shutil.rmtree(aside)
        return False
    clear_run_dir(logdir, entries)
    _restore(aside, logdir)
    print(f"{logdir}: restored the run that an interrupted --overwrite had set aside", flush=True)
    return True


def _restore(aside: Path, logdir: Path) -> None:
    """Move a run set aside by :func:`new_run_dir` back into ``logdir``."""
    for path in aside.iterdir():
        target = logdir / path.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(path, target)
    aside.rmdir()


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


class ExclusiveLock:
    """An advisory lock file held for the life of a writer (released by the OS if the process dies).

    Args:
        path: The lock file (created; removed on :meth:`release`).
        busy: The error message when another process holds the lock.
        error: The error class raised then.
    """

    def __init__(self, path: str | Path, busy: str, error: type[UserError] = UserError):
        import fcntl

        self.path = Path(path)
        while True:
            self._fd: int | None = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._fd)
                self._fd = None
                raise error(busy) from None
            # The holder before us may have removed the file between our open and our lock (release unlinks it):
            # then the lock is on a file no one else will open, so take the lock again on the path's file.
            try:
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(self._fd)

    def release(self) -> None:
        """Remove the lock file and release the lock (idempotent)."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
