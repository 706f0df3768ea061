"""Seeing rollouts: off-screen frames of ground truth next to NeRD, video files, viewer flags and their errors."""

import ctypes.util
import shutil

import numpy as np
import pytest
import torch

from nerd.checkpoint import save_checkpoint
from nerd.envs import make_env
from nerd.features import signature_of_env
from nerd.models.nerd_model import NeRDModel
from nerd.viewer import GROUND_TRUTH_COLOR, NERD_COLOR, RobotView, VideoWriter, make_offscreen_viewer
from tests.helpers import TINY, error_lines, run_script

# Off-screen rendering goes through EGL (Mesa's software rasteriser without a GPU); without libEGL there is
# no off-screen route at all, so these tests cannot run.
needs_egl = pytest.mark.skipif(ctypes.util.find_library("EGL") is None,
                               reason="libEGL not installed (apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri)")


@pytest.fixture(scope="module")
def tiny_cartpole_model(tmp_path_factory) -> str:
    """An untrained tiny Cartpole NeRD checkpoint: it drifts from the ground truth at once."""
    sig = signature_of_env(make_env("Cartpole", 1))
    path = tmp_path_factory.mktemp("viewer") / "tiny.pt"
    torch.manual_seed(0)
    save_checkpoint(path, NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {"history_length": 10},
                    history_length=10)
    return str(path)


def colour_pixels(frame: np.ndarray, colour: tuple[float, float, float]) -> int:
    """Pixels whose hue matches ``colour`` (shading changes brightness, not the channel order)."""
    rgb = frame.astype(np.int32)
    order = np.argsort(colour)  # e.g. orange: B < G < R
    lo, mid, hi = (rgb[..., i] for i in order)
    return int(((hi - lo > 60) & (hi >= mid) & (mid >= lo)).sum())


@needs_egl
def test_offscreen_frames_show_both_copies_and_change():
    """Headless ViewerGL frames: the right size, both colours present, and they differ as the robots move."""
    env = make_env("PendulumWithContact", 1)
    view = RobotView(env, make_offscreen_viewer(160, 90), [GROUND_TRUTH_COLOR, NERD_COLOR])
    try:
        frames = []
        for step in range(3):
            env.step_with_joint_act(torch.full((1, env.act_dim), 2000.0))
            moving = env.get_body_q()[0]
            view.log(step * env.frame_dt, [moving, moving])
            frames.append(view.viewer.get_frame().numpy().copy())
    finally:
        view.close()
    assert all(f.shape == (90, 160, 3) and f.dtype == np.uint8 for f in frames)
    assert colour_pixels(frames[-1], NERD_COLOR) > 20 and colour_pixels(frames[-1], GROUND_TRUTH_COLOR) > 20
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).sum() > 0


@needs_egl
def test_eval_writes_a_side_by_side_gif(tiny_cartpole_model, tmp_path, monkeypatch, capsys):
    """--video writes one GIF frame per 1/30 s of simulated time, and the robots move between frames."""
    from PIL import Image

    gif = tmp_path / "cartpole.gif"
    code, out, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--model-path",
                                tiny_cartpole_model, "--rollout-horizon", "10", "--video", str(gif),
                                "--video-size", "160", "90", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert f"wrote {gif}" in out
    with Image.open(gif) as image:
        assert image.size == (160, 90) and image.n_frames == 6  # steps 0, 2, ..., 10 at 60 Hz -> 30 fps
        frames = []
        for i in range(image.n_frames):
            image.seek(i)
            frames.append(np.asarray(image.convert("RGB")).astype(int))
    assert all(np.abs(a - b).sum() > 0 for a, b in zip(frames, frames[1:], strict=False))
    assert not list(tmp_path.glob(".*tmp*"))


def test_null_viewer_runs_the_side_by_side_rollout(tiny_cartpole_model, monkeypatch, capsys):
    """--viewer null steps both simulators for the whole horizon and reports the frames drawn."""
    code, out, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--model-path",
                                tiny_cartpole_model, "--rollout-horizon", "5", "--viewer", "null",
                                monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "6 frames in" in out
    # --mirror (ours) reaches the neural simulator that is shown.
    from nerd.neural_environment import NeuralEnvironment

    shown = []
    load = NeuralEnvironment.from_checkpoint.__func__

    def spy(cls, *args, **kwargs):
        shown.append(load(cls, *args, **kwargs))
        return shown[-1]

    monkeypatch.setattr(NeuralEnvironment, "from_checkpoint", classmethod(spy))
    code, out, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--model-path",
                                tiny_cartpole_model, "--rollout-horizon", "5", "--viewer", "null", "--mirror",
                                monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert [member.mirror is not None for member in shown[0].integrator.members] == [False, True]


@pytest.mark.parametrize("args,message", [
    (["--viewer", "usd"], "--viewer usd needs --output-path"),
    (["--video", "x.avi"], "--video must end in .gif or .mp4"),
    (["--viewer", "null", "--video", "x.gif"], "--viewer and --video are alternatives"),
    (["--viewer", "null", "--output-path", "x.usd"], "--output-path is written by --viewer usd or --viewer file"),
])
def test_bad_viewer_flags_are_one_line_errors(args, message, tmp_path, monkeypatch, capsys):
    """Inconsistent viewer flags fail before any simulation, with one error line and no file written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--env-mode", "ground-truth",
                              *args, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and len(error_lines(err)) == 1 and message in error_lines(err)[0]
    assert list(tmp_path.iterdir()) == []


def test_window_without_display_is_a_clear_error(monkeypatch, capsys):
    """--viewer gl on a machine without a display says what to use instead."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--env-mode", "ground-truth",
                              "--viewer", "gl", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "needs a display" in error_lines(err)[0] and "--video" in error_lines(err)[0]


def test_usd_viewer_writes_a_stage_or_names_the_extra(tmp_path, monkeypatch, capsys):
    """--viewer usd writes a USD stage with usd-core installed; without it one error line says how to install it,
    before any simulation."""
    usd = tmp_path / "rollout.usda"
    code, _, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--env-mode", "ground-truth",
                              "--rollout-horizon", "3", "--viewer", "usd", "--output-path", str(usd),
                              monkeypatch=monkeypatch, capsys=capsys)
    try:
        import pxr  # noqa: F401
    except ImportError:
        assert code == 1 and len(error_lines(err)) == 1
        assert "pip install usd-core" in error_lines(err)[0] and "[viewer]" in error_lines(err)[0]
        assert not usd.exists()
        return
    assert code == 0, err
    assert "timeSamples" in usd.read_text()  # an animated stage, not just the model


def test_file_viewer_records_every_frame(tmp_path, monkeypatch, capsys):
    """--viewer file writes Newton's own recording of the rollout (one state per frame)."""
    recording = tmp_path / "rollout.json"
    code, out, err = run_script("eval/eval_passive_motion.py", "--env-name", "Cartpole", "--env-mode", "ground-truth",
                                "--rollout-horizon", "4", "--viewer", "file", "--output-path", str(recording),
                                monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "5 frames in" in out and recording.stat().st_size > 1000


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed (MP4 only; GIFs need no program)")
def test_mp4_writer(tmp_path):
    """MP4 frames go through ffmpeg; an odd frame size is padded to the even size H.264 needs."""
    writer = VideoWriter(tmp_path / "clip.mp4")
    for value in (0, 120, 240):
        writer.add(np.full((45, 81, 3), value, dtype=np.uint8))
    path = writer.close()
    assert path.stat().st_size > 100 and not list(tmp_path.glob(".*tmp*"))


@needs_egl
def test_cartpole_copies_stand_side_by_side():
    """The Cartpole's two copies share the frame's height, ground truth on the left and NeRD on the right."""
    env = make_env("Cartpole", 1)
    view = RobotView(env, make_offscreen_viewer(480, 270), [GROUND_TRUTH_COLOR, NERD_COLOR])
    try:
        view.log(0.0, [env.get_body_q()[0], env.get_body_q()[0]])
        frame = view.viewer.get_frame().numpy().copy()
    finally:
        view.close()
    rows, cols = {}, {}
    for name, colour in (("gt", GROUND_TRUTH_COLOR), ("nerd", NERD_COLOR)):
        rgb = frame.astype(np.int32)
        lo, mid, hi = (rgb[..., i] for i in np.argsort(colour))
        ys, xs = np.nonzero((hi - lo > 100) & (hi >= mid) & (mid >= lo))  # saturated: not the blue sky
        assert len(xs) > 20, name
        rows[name], cols[name] = ys.mean(), xs.mean()
    assert cols["gt"] < 240 < cols["nerd"]
    assert abs(rows["gt"] - rows["nerd"]) < 10
