"""Where the source checkout this package runs from keeps its files (configs, shipped models)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
"""The checkout's root: shipped configs name files relative to it (``cfg/...``, ``pretrained_models/...``)."""
