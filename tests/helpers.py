"""Helpers shared by the test modules: the repository root, entry points run in-process, and tiny models."""

import runpy
import sys
import traceback
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


def com_acceleration(env, joint_acts: torch.Tensor) -> torch.Tensor:
    """The whole robot's centre-of-mass acceleration (3,) [m/s²] over one frame of ``env`` (one env) under
    ``joint_acts``, from the bodies' masses and COM velocities before and after."""
    mass = torch.as_tensor(env.model.body_mass.numpy())

    def com_velocity() -> torch.Tensor:
        return (mass[:, None] * torch.as_tensor(env.state_0.body_qd.numpy())[:, :3]).sum(0) / mass.sum()

    before = com_velocity()
    env.step_with_joint_act(joint_acts)
    return (com_velocity() - before) / env.frame_dt


def tiny_model(env, seed: int, **limit_options) -> NeRDModel:
    """An untrained tiny model for ``env`` (its own weights per seed; our joint-limit groups on request)."""
    torch.manual_seed(seed)
    sig = signature_of_env(env, **limit_options)
    return NeRDModel(sig.input_groups, sig.target_dim, TINY)


def tiny_neural_env(name: str, num_envs: int, env_mode: str = "neural", **kwargs) -> NeuralEnvironment:
    """A NeuralEnvironment with an untrained tiny model (unit statistics)."""
    env = make_env(name, num_envs, **kwargs)
    sig = signature_of_env(env)
    return NeuralEnvironment(env, NeRDModel(sig.input_groups, sig.target_dim, TINY), env_mode)


class HostSyncCounter(TorchDispatchMode):
    """Counts the ops that synchronise with the host on a GPU, with the repository line that issued each.

    Tensors built from host data are seen by the dispatcher. Read-backs are counted at the Python methods that do
    them: under ``torch.inference_mode`` (the integrator's prediction) the dispatcher does not see
    ``_local_scalar_dense``, so a read-back there went uncounted.
    """

    OPS = {"aten.lift_fresh.default": "tensor from host data", "aten.nonzero.default": "read-back"}
    READ_BACKS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__")

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()
        self._originals: dict = {}

    def _record(self, kind: str) -> None:
        stack = traceback.extract_stack()
        if not any("/warp/" in frame.filename for frame in stack):
            ours = [f for f in stack if f.filename.startswith(str(REPO / "nerd"))]
            where = f"{Path(ours[-1].filename).relative_to(REPO)}:{ours[-1].lineno}" if ours else "?"
            self.counts[(kind, where)] += 1

    def __enter__(self):
        self._originals = {name: getattr(torch.Tensor, name) for name in self.READ_BACKS}
        for name, original in self._originals.items():
            def counted(tensor, *args, _original=original, **kwargs):
                self._record("read-back")
                return _original(tensor, *args, **kwargs)
            setattr(torch.Tensor, name, counted)
        return super().__enter__()

    def __exit__(self, *exc_info):
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc_info)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = self.OPS.get(str(func))
        if kind is not None:
            self._record(kind)
        return func(*args, **(kwargs or {}))

    def total(self, kind: str) -> int:
        return sum(n for (k, _), n in self.counts.items() if k == kind)
