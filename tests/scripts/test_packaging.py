"""Packaging: the nerd-* console scripts resolve to entry points whose --help shows every default."""

import ast
import importlib
import importlib.metadata
import re

import pytest

from tests.scripts.test_entry_points import REPO

CONSOLE_SCRIPTS = {
    "nerd-generate": "generate/generate_dataset.py",
    "nerd-visualize": "generate/visualize_dataset.py",
    "nerd-train": "train/train.py",
    "nerd-average": "train/average_checkpoints.py",
    "nerd-eval": "eval/eval_passive_motion.py",
    "nerd-rl": "eval/run_rl.py",
    "nerd-batch-eval": "eval/batch_eval_policy.py",
    "nerd-transfer": "train/transfer_loop.py",
    "nerd-data-range": "train/record_data_range.py",
}


def setup_py_console_scripts() -> dict[str, str]:
    """``name -> module:function`` of setup.py's console_scripts list, read without running setup()."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "console_scripts":
            return dict(entry.split("=", 1) for entry in ast.literal_eval(node.value))
    raise AssertionError("setup.py defines no console_scripts list")


def test_setup_py_declares_every_console_script():
    """Each documented command is declared, its target is importable, and its wrapper script calls the same."""
    declared = setup_py_console_scripts()
    assert set(declared) == set(CONSOLE_SCRIPTS)
    for name, target in declared.items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), name
        assert f"from {module} import {function}" in (REPO / CONSOLE_SCRIPTS[name]).read_text()


def test_installed_metadata_matches_setup_py():
    """Where nerd is installed from this tree's setup.py, its console scripts are the declared ones."""
    installed = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
                 if ep.name.startswith("nerd-")}
    if not installed:
        pytest.skip("the installed nerd predates its console scripts (reinstall: pip install --no-deps -e .)")
    assert installed == setup_py_console_scripts()


EXPECTED_DEFAULTS = {
    "nerd-generate": {"--trajectory-length": "100", "--num-envs": "2048", "--compression": "lzf", "--device": "cpu",
                      "--seed": "0"},
    "nerd-eval": {"--env-mode": "neural", "--num-envs": "2048", "--num-rollouts": "2048", "--rollout-horizon": "100",
                  "--seed": "500", "--video-size": "[480, 270]"},
    "nerd-rl": {"--num-games": "64", "--device": "cpu", "--seed": "0"},
    "nerd-train": {"--device": "cpu", "--seed": "0 for a new run, the run's own with --resume"},
    "nerd-batch-eval": {"--device": "cpu"},
    "nerd-average": {"--valid-batches": "50", "--batch-size": "2048", "--seed": "0", "--device": "cpu"},
    "nerd-visualize": {},
    "nerd-transfer": {"--device": "cpu", "--seed": "0"},
    "nerd-data-range": {"--device": "cpu"},
}


def option_help(text: str) -> dict[str, str]:
    """Each option's help block of an argparse --help text, whitespace collapsed: ``--flag -> text``."""
    blocks = re.split(r"\n\s{2}(?=-)", text.split("options:", 1)[1])
    return {block.split()[0].rstrip(","): " ".join(block.split()) for block in blocks if block.strip().startswith("-")}


@pytest.mark.parametrize("name", sorted(CONSOLE_SCRIPTS))
def test_help_shows_defaults(name, capsys):
    """--help exits 0, keeps the examples' line breaks, and states each option's default."""
    module, _ = setup_py_console_scripts()[name].split(":")
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module).main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    if name in ("nerd-eval", "nerd-generate", "nerd-rl"):
        assert "\\\n" in text  # multi-line example commands keep their continuation lines
    blocks = option_help(text)
    for option, default in EXPECTED_DEFAULTS[name].items():
        assert f"(default: {default})" in blocks[option], blocks[option]
    # Options without a meaningful default (None, a flag) do not print one.
    assert "(default: None)" not in text and "(default: False)" not in text
