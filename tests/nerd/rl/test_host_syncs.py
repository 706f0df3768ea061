"""The neural step's host synchronisations, counted on the CPU.

On a GPU two things stall the host every time they run: building a tensor from Python data (a host-to-device copy)
and reading a device value back (``.item()``, ``bool(tensor)``). A run on an H100 counted one sync too many in
the Ant's step, a gravity constant built every step; the RL tasks built more (34 per Franka reach step, 17 in each
forward-kinematics call). torch's dispatcher shows either op on any device, so this test holds the step to its
budget without a GPU: no tensor built from host data, at most one read-back. Warp's zero-copy
``wp.to_torch`` views are not copies and are not counted.
"""

import pytest
import torch

from nerd.checkpoint import shipped_model_path
from nerd.envs import make_env
from nerd.modes import NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.rl.tasks import make_task
from nerd.rl.vec_env import NeRDVecEnv
from tests.helpers import HostSyncCounter

TASKS = {"Cartpole": "swingup", "Ant": "run", "Franka": "reach", "Anymal": "forward_walk"}


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



@pytest.mark.parametrize("robot, ensemble", [(robot, False) for robot in TASKS] + [("Cartpole", True)],
                         ids=[*TASKS, "Cartpole-ensemble"])
def test_capturable_neural_frame_never_syncs(robot, ensemble):
    """With ``capture_frame`` (the frame a GPU records as one CUDA graph) a shipped model's frame neither builds a
    tensor from host data nor reads one back: the NaN check is a device flag, read every ``nan_check_frames``."""
    n = 4
    model = shipped_model_path(robot)
    models = [model, model.parent / "lookahead" / "model.pt"] if ensemble else model
    nenv = NeuralEnvironment.from_checkpoint(make_env(robot, n), models, NEURAL, capture_frame=True)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    torques = torch.zeros(n, nenv.env.act_dim)
    nenv.step_with_joint_act(torques)  # the first frame builds what later frames reuse (a GPU records it then)
    with HostSyncCounter() as counter:
        for _ in range(nenv.nan_check_frames - 2):
            nenv.step_with_joint_act(torques)
    assert counter.total("tensor from host data") == 0 and counter.total("read-back") == 0, dict(counter.counts)
    with HostSyncCounter() as counter:
        nenv.step_with_joint_act(torques)  # the interval's last frame reads the flags: once
    assert counter.total("read-back") == 1, dict(counter.counts)
