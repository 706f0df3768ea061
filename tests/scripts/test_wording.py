"""The repository speaks to its users about the project only: no words of the team's internal work process
(numbered work periods, borrowed machines, issue numbers) and no references to documents outside the repository."""

import re
import subprocess
from pathlib import Path

from tests.helpers import REPO

# Assembled from parts so that this file does not match itself.
FORBIDDEN = re.compile("|".join([
    r"(?<![a-z])stops?[-_ ]?[0-9]", r"\blent\b", r"device[- ]minutes?", r"\bissues? #?[0-9]",
    r"spec('s)? §", r"robots" + r"\.md", r"design" + r" card", r"nerd" + r"-spec", r"release" + r"-tasks",
    r"\.\./" + r"shared", r"\bsessions?\b",
]), flags=re.I)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".cfg", ".toml", ".ini", ".json", ".csv", ""}


def tracked_text_files() -> list:
    """The repository's tracked text files (binary checkpoints and images left out)."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [REPO / n for n in names if (REPO / n).suffix in TEXT_SUFFIXES and (REPO / n).is_file()]


def test_no_internal_process_words_anywhere():
    """Every tracked text file and every file name is free of the internal words."""
    hits = []
    for path in tracked_text_files():
        rel = path.relative_to(REPO)
        if path == Path(__file__):
            continue  # the examples of the check below
        if FORBIDDEN.search(str(rel)):
            hits.append(f"{rel}: file name")
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = FORBIDDEN.search(line)
            if match:
                hits.append(f"{rel}:{number}: {match.group(0)!r}")
    assert not hits, f"{len(hits)} lines:\n" + "\n".join(hits[:50])


def test_the_check_finds_the_words():
    """The pattern catches each kind of internal reference (a check that cannot fail would prove nothing)."""
    for text in ("in stop 22 we", "Stops 27 and 28", "cartpole_rail_stop32.json", "the H200 lent for",
                 "15 device-minutes", "(issue 8)", "spec §9", "the spec's §2", "this session's run"):
        assert FORBIDDEN.search(text), text
    for text in ("the policy stops at 5 m", "silently", "equivalent", "the release's sampler"):
        assert not FORBIDDEN.search(text), text
