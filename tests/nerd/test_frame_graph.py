"""The neural frame a GPU records and replays (``NeuralEnvironment(capture_frame=True)``), checked on the CPU.

A CUDA graph replays the launches of one recorded frame on the buffers it recorded. On the CPU the same code runs
uncaptured, so these tests check what the replay relies on: the path computes exactly what the plain path
computes, every buffer it writes keeps its address from frame to frame, and it never waits for the host.
"""

import pytest
import torch

from nerd.envs import make_env
from nerd.envs.interop import FrameGraph
from nerd.errors import RolloutDivergedError, UserError
from nerd.neural_environment import NeuralEnvironment
from tests.helpers import HostSyncCounter, tiny_model

CASES = {
    "Ant ensemble": ("Ant", 2, False),  # free base, contacts, the ensemble's disagreement
    "Cartpole mirrored": ("Cartpole", 1, True),  # the mirror option: two members of one model
    "PendulumWithContact": ("PendulumWithContact", 1, False),
}


def neural_env(name: str, num_models: int, mirror: bool, num_envs: int, device: str = "cpu", **kwargs
               ) -> NeuralEnvironment:
    """A NeuralEnvironment of ``name`` with ``num_models`` untrained tiny models (seeded: equal across calls)."""
    env = make_env(name, num_envs, device=device)
    return NeuralEnvironment(env, [tiny_model(env, seed) for seed in range(num_models)], mirror=mirror, **kwargs)


def rollout(nenv: NeuralEnvironment, frames: int = 9) -> list[dict[str, torch.Tensor]]:
    """States, contact depths and (for an ensemble) disagreement after each frame of a rollout that resets envs 1
    and 2 midway and steps two frames in the ground truth."""
    gen = torch.Generator().manual_seed(3)
    nenv.reset(generator=torch.Generator().manual_seed(1))
    record = []
    for frame in range(frames):
        if frame == 3:
            nenv.reset(env_ids=[1, 2], generator=torch.Generator().manual_seed(2))
        nenv.set_env_mode("ground-truth" if frame in (5, 6) else "neural")
        nenv.step((0.3 * torch.rand(nenv.num_envs, nenv.action_dim, generator=gen) - 0.15).to(nenv.torch_device))
        out = {"states": nenv.get_states(), "depths": nenv.get_contacts().get("contact_depths", torch.zeros(0))}
        if hasattr(nenv.integrator, "disagreement"):
            out["disagreement"] = nenv.integrator.disagreement.clone()
        record.append(out)
    return record


@pytest.mark.parametrize("case", list(CASES))
def test_capturable_frame_computes_exactly_what_the_plain_frame_computes(case, device):
    """With ``capture_frame`` a rollout with resets and a ground-truth stretch is the plain path's: bit for bit on
    the CPU (uncaptured: static buffers, deferred NaN check); on a GPU, where the frame is recorded once and
    replayed, to float32 rounding."""
    name, num_models, mirror = CASES[case]
    plain = rollout(neural_env(name, num_models, mirror, 4, device))
    graph_env = neural_env(name, num_models, mirror, 4, device, capture_frame=True, nan_check_frames=2)
    capturable = rollout(graph_env)
    assert graph_env.frame_graph.captured == (device == "cuda")
    for frame, (a, b) in enumerate(zip(plain, capturable, strict=True)):
        for key in a:
            if device == "cpu":
                assert torch.equal(a[key], b[key]), f"{key} differs at frame {frame}"
            else:
                torch.testing.assert_close(b[key], a[key], atol=1e-5, rtol=1e-5, msg=f"{key} at frame {frame}")
    assert not torch.equal(plain[0]["states"], plain[-1]["states"])


@pytest.mark.parametrize("case", list(CASES))
def test_capturable_frame_keeps_its_buffers_and_never_waits_for_the_host(case):
    """After the first frame, the frame's writes land in the same buffers every frame (a replayed graph writes the
    addresses it recorded), and the frame reads nothing back to the host (the NaN check goes to device flags)."""
    name, num_models, mirror = CASES[case]
    nenv = neural_env(name, num_models, mirror, 3, capture_frame=True, nan_check_frames=100)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    torques = torch.full((3, nenv.env.act_dim), 0.1)
    nenv.step_with_joint_act(torques)
    integrator = nenv.integrator
    members = getattr(integrator, "members", [integrator])

    def addresses() -> list[int]:
        buffers = [nenv.env.state_0.joint_q.ptr, nenv.env.state_0.body_q.ptr, integrator.nan_flags.data_ptr()]
        for member in members:
            buffers += [member._tokens.data_ptr(), member._last_token.data_ptr(), member.history_count.data_ptr()]
        if len(members) > 1:
            buffers.append(integrator._member_targets.data_ptr())
        return buffers

    before = addresses()
    with HostSyncCounter() as counter:
        for _ in range(3):
            nenv.step_with_joint_act(torques)
    assert not counter.counts, dict(counter.counts)
    assert addresses() == before
    assert integrator.history_count.tolist() == [4, 4, 4]
    with HostSyncCounter() as counter:
        nenv.check_diverged()  # reading the flags does synchronise: the counter sees it
    assert counter.total("read-back") >= 1


def test_deferred_nan_check_raises_within_its_interval_and_at_resets():
    """A non-finite prediction is raised, naming the env, at the next read of the flags: after ``nan_check_frames``
    frames or at the next reset, whichever comes first; non-finite torques are the caller's error as in the
    plain path. Each divergence is raised once."""
    nenv = neural_env("Cartpole", 1, False, 2, capture_frame=True, nan_check_frames=3)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    predict = nenv.integrator.predict_targets
    nan_in_env_1 = torch.tensor([[0.0, 0.0, 0.0, 0.0], [float("nan"), 0.0, 0.0, 0.0]])
    nenv.integrator.predict_targets = lambda: predict() + nan_in_env_1
    nenv.step(torch.zeros(2, 1))  # frame 1: diverges, not read yet
    nenv.step(torch.zeros(2, 1))
    with pytest.raises(RolloutDivergedError, match=r"envs \[1\]"):
        nenv.step(torch.zeros(2, 1))  # frame 3: the flags are read
    nenv.integrator.predict_targets = predict
    nenv.reset(generator=torch.Generator().manual_seed(0))  # raised once: the reset goes through
    nenv.integrator.predict_targets = lambda: predict() + nan_in_env_1
    nenv.step(torch.zeros(2, 1))
    with pytest.raises(RolloutDivergedError, match=r"envs \[1\]"):
        nenv.reset(env_ids=[1], generator=torch.Generator().manual_seed(0))
    nenv.integrator.predict_targets = predict
    nenv.reset(generator=torch.Generator().manual_seed(0))
    nenv.step(torch.tensor([[0.0], [float("nan")]]))
    with pytest.raises(UserError, match="NaN or inf"):
        nenv.check_diverged()
    nenv.reset(generator=torch.Generator().manual_seed(0))
    for _ in range(4):
        nenv.step(torch.zeros(2, 1))
    assert torch.isfinite(nenv.get_states()).all()


def test_nan_check_switched_off_leaves_no_flags_and_a_bad_interval_is_refused():
    """The RL vec env's setting (check off, divergence handled per env) records no flags; a check interval below
    one is a clear error."""
    nenv = neural_env("Cartpole", 1, False, 2, capture_frame=True)
    nenv.set_nan_check(False)
    assert nenv.integrator.nan_flags is None
    nenv.reset(generator=torch.Generator().manual_seed(0))
    nenv.step(torch.tensor([[0.0], [float("nan")]]), check_finite=False)  # as the vec env steps
    nenv.check_diverged()  # nothing recorded, nothing raised
    nenv.set_nan_check(True)
    assert nenv.integrator.nan_flags is not None
    with pytest.raises(UserError, match="nan_check_frames"):
        neural_env("Cartpole", 1, False, 2, capture_frame=True, nan_check_frames=0)


def test_frame_graph_runs_its_body_every_call_where_it_does_not_capture():
    """On the CPU (or disabled) a FrameGraph is its body, called once per frame, and records nothing."""
    calls = []
    env = make_env("Cartpole", 1)
    for enabled in (True, False):
        graph = FrameGraph(lambda: calls.append(1), env.device, enabled=enabled)
        graph()
        graph()
        assert not graph.captures and not graph.captured
    assert len(calls) == 4
