"""The neural step's host synchronisations, counted on the CPU.

On a GPU two things stall the host every time they run: building a tensor from Python data (a host-to-device copy)
and reading a device value back (``.item()``, ``bool(tensor)``). A run on an H100 counted one sync too many in
the Ant's step, a gravity constant built every step; the RL tasks built more (34 per Franka reach step, 17 in each
forward-kinematics call). torch's dispatcher shows either op on any device, so this test holds the step to its
budget without a GPU: no tensor built from host data, at most one read-back. Warp's zero-copy
``wp.to_torch`` views are not copies and are not counted.
"""

import traceback
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nerd.checkpoint import shipped_model_path
from nerd.envs import make_env
from nerd.modes import NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.rl.tasks import make_task
from nerd.rl.vec_env import NeRDVecEnv
from tests.helpers import REPO

TASKS = {"Cartpole": "swingup", "Ant": "run", "Franka": "reach", "Anymal": "forward_walk"}


class HostSyncCounter(TorchDispatchMode):
    """Counts the ops that synchronise with the host on a GPU, with the repository line that issued each.

    Tensors built from host data are seen by the dispatcher. Read-backs are counted at the Python methods that do
    them: under ``torch.inference_mode`` (the integrator's prediction) the dispatcher does not see
    ``_local_scalar_dense``, so a read-back there went uncounted.
    """

    OPS = {"aten.lift_fresh.default": "tensor from host data"}
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


def test_counter_sees_both_kinds():
    """The counter itself: a constant built per call and a read-back are counted, under inference mode too; a view
    or a zeros is not."""
    x = torch.randn(3)
    item = torch.Tensor.item
    with HostSyncCounter() as counter:
        x.new_tensor((0.0, 0.0, 1.0))
        bool(torch.isfinite(x).all())
        torch.zeros(3)
        x[1:]
        with torch.inference_mode():
            float((2 * x).max())
            (2 * x).tolist()
    assert counter.total("tensor from host data") == 1 and counter.total("read-back") == 3
    assert torch.Tensor.item is item  # the counting wrappers are gone after the block


@pytest.mark.parametrize("robot, ensemble", [(robot, False) for robot in TASKS] + [("Cartpole", True)],
                         ids=[*TASKS, "Cartpole-ensemble"])
def test_neural_step_syncs_at_most_once(robot, ensemble):
    """A steady-state NeRD step (shipped model, no env resetting) builds no tensor from host data and reads back
    once: the passive step's NaN check, or the RL step's one ``tolist``.
    The Cartpole's two shipped lineages as an ensemble keep that budget."""
    n = 4
    model = shipped_model_path(robot)
    models = [model, model.parent / "lookahead" / "model.pt"] if ensemble else model
    nenv = NeuralEnvironment.from_checkpoint(make_env(robot, n), models, NEURAL)
    vec = NeRDVecEnv(nenv, make_task(robot, TASKS[robot], n, nenv.torch_device), seed=0)
    vec.reset()
    actions = torch.zeros(n, vec.action_space.shape[0])
    for _ in range(12):  # past the history's warm-up and every lazily built buffer
        vec.step(actions)
    with HostSyncCounter() as counter:
        _, _, dones, _ = vec.step(actions)
    assert not dones.any(), "an env reset in the counted step; the test needs a steady state"
    assert counter.total("tensor from host data") == 0, dict(counter.counts)
    assert counter.total("read-back") == 1, dict(counter.counts)  # the vec env's one tolist
    with HostSyncCounter() as counter:
        nenv.step_with_joint_act(torch.zeros(n, nenv.env.act_dim))
    assert counter.total("tensor from host data") == 0, dict(counter.counts)
    assert counter.total("read-back") == 1, dict(counter.counts)

