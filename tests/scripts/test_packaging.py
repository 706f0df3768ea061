"""Packaging: the nerd-* console scripts resolve to entry points whose --help shows every default."""

import argparse
import ast
import importlib
import importlib.metadata
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO

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


ENGINE_MODULES = ("torch", "warp", "newton", "rl_games", "matplotlib", "h5py")
"""Modules whose import takes seconds: ``--help`` and input errors must not wait for them."""

IMPORTS_AFTER = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
print("ENGINE", sorted(m for m in {modules!r} if m in sys.modules))
"""


def engine_modules_loaded(script: str, *args: str, cwd) -> tuple[list[str], str]:
    """Run ``script args`` in a fresh interpreter: (the engine modules it imported, its stderr)."""
    result = subprocess.run([sys.executable, "-c", IMPORTS_AFTER.format(modules=ENGINE_MODULES),
                             str(REPO / script), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    line = [text for text in result.stdout.splitlines() if text.startswith("ENGINE")][-1]
    return ast.literal_eval(line.removeprefix("ENGINE ")), result.stderr


@pytest.mark.parametrize("script", sorted({*CONSOLE_SCRIPTS.values(), "eval/play_release_policies.py"}))
def test_help_loads_no_engine(script, tmp_path):
    """--help parses and prints without importing Warp, Newton, torch, rl-games or matplotlib (well under 2 s)."""
    loaded, err = engine_modules_loaded(script, "--help", cwd=tmp_path)
    assert loaded == [], err[-500:]


@pytest.mark.parametrize("script,args,message", [
    ("generate/generate_dataset.py", ["--env-name", "Nope", "--num-transitions", "10", "--dataset-dir", "d",
                                      "--dataset-name", "x"], "unknown env name 'Nope'"),
    ("eval/eval_passive_motion.py", ["--env-name", "Nope"], "unknown env name 'Nope'"),
    ("eval/eval_passive_motion.py", ["--env-name", "Cartpole", "--env-mode", "neural"], "needs --model-path"),
    ("eval/eval_passive_motion.py", ["--env-name", "Cartpole", "--env-mode", "ground-truth", "--output", "x.txt"],
     "give a .json path"),
    ("eval/run_rl.py", ["--env-mode", "ground-truth"], "--rl-cfg is required"),
    ("eval/run_rl.py", ["--playback", "missing.pth"], "policy checkpoint not found: missing.pth"),
    ("eval/batch_eval_policy.py", ["--eval-cfg", "missing.yaml"], "config file not found: missing.yaml"),
    ("eval/play_release_policies.py", ["--release-dir", ".", "--num-games", "2"], "published policy not found"),
    ("train/train.py", ["--logdir", "run"], "--cfg is required"),
    ("train/average_checkpoints.py", ["a.pt", "b.pt", "--output", "c.pt"], "checkpoint not found: a.pt"),
    ("generate/visualize_dataset.py", ["--dataset", "missing.hdf5"], "dataset not found: missing.hdf5"),
])
def test_input_errors_load_no_engine(script, args, message, tmp_path):
    """Simple input errors (names, paths, flag combinations) are reported before the engine is imported."""
    loaded, err = engine_modules_loaded(script, *args, cwd=tmp_path)
    assert message in err and err.strip().splitlines()[-1].startswith("error:"), err[-500:]
    assert loaded == []


@pytest.mark.parametrize("module", sorted({*(target.split(":")[0] for target in setup_py_console_scripts().values()),
                                           "nerd.scripts.play_release_policies"}))
def test_every_option_help_is_short(module, monkeypatch):
    """Each option's help says what the option does in a sentence or two; studies' numbers belong in docs/."""
    parsers = []

    def capture(self, *args, **kwargs):
        parsers.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit):
        importlib.import_module(module).main([])
    long = {str(action.option_strings or action.dest): len(action.help) for action in parsers[0]._actions
            if action.help and action.help != argparse.SUPPRESS and len(action.help) > 300}
    assert long == {}


@pytest.mark.parametrize("module", sorted({*(target.split(":")[0] for target in setup_py_console_scripts().values()),
                                           "nerd.scripts.play_release_policies"}))
def test_examples_write_results_under_outputs(module):
    """Examples write result files and videos under outputs/ (ignored by git), never out/ or the working directory."""
    doc = importlib.import_module(module).__doc__
    assert not re.search(r"(^|[\s=])out/", doc), doc
    for flag, path in re.findall(r"(--output|--video|--png) ([\w./-]+\.\w+)", doc):
        assert path.startswith(("outputs/", "runs/", "pretrained_models/")), (flag, path)
