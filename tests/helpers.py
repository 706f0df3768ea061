"""Helpers shared by the test modules: the repository root, entry points run in-process, and tiny models."""

import runpy
import sys
from pathlib import Path

from nerd.envs import make_env
from nerd.features import signature_of_env
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.models.transformer import TransformerConfig
from nerd.neural_environment import NeuralEnvironment

REPO = Path(__file__).resolve().parents[1]
"""The repository's root."""

TINY = ModelConfig(type="transformer",
                   transformer=TransformerConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, head_hidden=[16]))
"""A transformer small enough to train in a second."""


def run_script(script: str, *args: str, monkeypatch, capsys) -> tuple[int, str, str]:
    """Run an entry point in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    code = 0
    try:
        runpy.run_path(str(REPO / script), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(stderr: str) -> list[str]:
    """Lines of stderr that are not Warp's start-up banner or kernel-cache notices."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def tiny_neural_env(name: str, num_envs: int, env_mode: str = "neural", **kwargs) -> NeuralEnvironment:
    """A NeuralEnvironment with an untrained tiny model (unit statistics)."""
    env = make_env(name, num_envs, **kwargs)
    sig = signature_of_env(env)
    return NeuralEnvironment(env, NeRDModel(sig.input_groups, sig.target_dim, TINY), env_mode)
