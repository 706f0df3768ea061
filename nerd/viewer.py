"""Seeing a rollout: Newton's viewers, off-screen video, and ground truth next to NeRD.

A :class:`RobotView` draws copies of one robot, each in its own Newton world (offset and coloured: ground truth
blue, NeRD orange), from poses that the caller takes from separate simulators. It drives one of Newton's viewers:

* ``gl``: :class:`newton.viewer.ViewerGL` in a window (needs a display and pyglet, the ``viewer`` extra);
* ``usd``: :class:`newton.viewer.ViewerUSD`, a time-sampled ``.usd`` file (needs usd-core, the ``viewer`` extra);
* ``file``: :class:`newton.viewer.ViewerFile`, Newton's own recording (``.json`` or ``.bin``);
* ``null``: :class:`newton.viewer.ViewerNull`, nothing drawn (tests, timing).

``--video X.gif`` (or ``.mp4``) renders off-screen with :class:`~newton.viewer.ViewerGL` in pyglet's headless
mode: an EGL context without a display, drawn on the CPU by Mesa's software rasteriser when there is no GPU
(Debian/Ubuntu packages ``libegl1 libegl-mesa0 libgl1-mesa-dri``). GIFs are written with Pillow; MP4 needs the
``ffmpeg`` program.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import newton
import numpy as np
import torch
import warp as wp

from nerd.cli import NO_DISPLAY, USD_MISSING, VIEWER_KINDS, display_available
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL

GROUND_TRUTH_COLOR = (0.30, 0.52, 0.85)
NERD_COLOR = (0.95, 0.52, 0.12)
GROUND_COLOR = (0.55, 0.55, 0.55)
VIDEO_FPS = 30
"""Frames per second of ``--video`` files; simulator frames are skipped to reach it (GIF players cap near 50)."""


@dataclass(frozen=True)
class Layout:
    """Where the copies of a robot stand and where the camera looks from.

    Attributes:
        spacing: Offset between neighbouring copies [m] (a Newton world spacing); the second copy stands to the
            right of (or above) the first.
        view_direction: Direction the camera looks along (world axes); it is perpendicular to ``spacing``
            so that the copies appear next to each other.
        distance: Camera distance from the copies' midpoint [m].
        ground: Draw each env's ground plane (robots that touch it).
        follow: Keep the copies' midpoint in the centre (robots that travel); otherwise the camera stays on the
            copies' initial midpoint, so that motion is seen against the fixed frame.
        rail: Half-length [m] of a rail drawn along x under each copy (the cart's track), 0 for none.
    """

    spacing: tuple[float, float, float]
    view_direction: tuple[float, float, float]
    distance: float
    ground: bool = True
    follow: bool = False
    rail: float = 0.0


LAYOUTS = {
    # The cart slides +-4 m along x and the pole turns in the xz plane, seen from the side: the copies stand side by
    # side along x, 10 m apart, so that their 8.5 m rails leave a gap (ground truth left, NeRD right).
    "Cartpole": Layout((10.0, 0.0, 0.0), (0.0, 1.0, -0.1), 13.5, ground=False, rail=4.25),
    # Two 1.5 m links swinging in the xz plane about a pivot 2 m up.
    "PendulumWithContact": Layout((7.0, 0.0, 0.0), (0.0, 1.0, -0.2), 13.0),
    # Looking along +x, -y is to the right: the second copy (NeRD) stands right of the first.
    "Ant": Layout((0.0, -2.5, 0.0), (1.0, 0.0, -0.6), 6.0, follow=True),
}
DEFAULT_LAYOUT = Layout((0.0, -3.0, 0.0), (1.0, 0.0, -0.4), 7.0, follow=True)


def make_newton_viewer(kind: str, output_path: str | None = None, fps: int = 60):
    """One of Newton's viewers by name; a missing optional package or display is a UserError naming the fix."""
    import newton.viewer as nv

    no_display = UserError(NO_DISPLAY)
    if kind == "gl" and not display_available():
        raise no_display
    if kind in ("usd", "file"):
        Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "gl":
            return nv.ViewerGL()
        if kind == "usd":
            return nv.ViewerUSD(output_path=str(output_path), fps=fps, up_axis="Z", num_frames=None)
        if kind == "file":
            return nv.ViewerFile(str(output_path))
        if kind == "null":
            return nv.ViewerNull()
    except ImportError as err:
        if kind == "usd":
            raise UserError(f"{USD_MISSING} ({err})") from err
        raise UserError(f"--viewer {kind} needs the viewer extra: pip install -e '.[viewer]' ({err})") from err
    except Exception as err:
        # pyglet reports an unreachable X display with its own exception type.
        if kind == "gl" and type(err).__name__ == "NoSuchDisplayException":
            raise no_display from err
        raise
    raise UserError(f"unknown viewer '{kind}'; valid viewers: {', '.join(VIEWER_KINDS)}")


def make_offscreen_viewer(width: int, height: int):
    """:class:`~newton.viewer.ViewerGL` without a window (EGL), whose frames are read back with ``get_frame``."""
    import pyglet

    # Must be set before pyglet opens its first window; a process that already opened one keeps X11.
    pyglet.options["headless"] = True
    import newton.viewer as nv

    try:
        return nv.ViewerGL(width=width, height=height, headless=True)
    except ImportError as err:
        raise UserError(f"--video needs the viewer extra: pip install -e '.[viewer]' ({err})") from err
    except Exception as err:
        raise UserError("--video renders through EGL and found no usable EGL driver "
                         f"(Debian/Ubuntu: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri): {err}") from err


class RobotView:
    """Copies of one robot drawn side by side in a Newton viewer, from poses supplied every frame.

    Args:
        env: An environment of the robot (its builder, name and ground planes are used; it is not stepped).
        viewer: A Newton viewer (see :func:`make_newton_viewer`, :func:`make_offscreen_viewer`).
        colors: One RGB colour per copy, e.g. ``(GROUND_TRUTH_COLOR, NERD_COLOR)``.
        env_index: The env of ``env`` whose ground plane is drawn.
    """

    def __init__(self, env, viewer, colors: Sequence[tuple[float, float, float]], env_index: int = 0):
        self.viewer = viewer
        self.copies = len(colors)
        self.layout = LAYOUTS.get(env.name, DEFAULT_LAYOUT)
        robot = newton.ModelBuilder(up_axis=newton.Axis.Z, gravity=(0.0, 0.0, -9.81))
        env.build_robot(robot)
        robot_shapes = robot.shape_count
        visual_only = newton.ModelBuilder.ShapeConfig(has_shape_collision=False, has_particle_collision=False)
        if self.layout.rail > 0.0:
            robot.add_shape_box(-1, hx=self.layout.rail, hy=0.02, hz=0.02, color=GROUND_COLOR, cfg=visual_only)
        if self.layout.ground and hasattr(env, "get_ground_planes"):
            normals, points = (t[env_index].cpu().tolist() for t in env.get_ground_planes())
            d = -sum(n * p for n, p in zip(normals, points, strict=False))
            robot.add_shape_plane(plane=(*normals, d), width=8.0, length=8.0, color=GROUND_COLOR, cfg=visual_only)
        builder = newton.ModelBuilder(up_axis=newton.Axis.Z, gravity=(0.0, 0.0, -9.81))
        builder.replicate(robot, self.copies)
        self.model = builder.finalize(device=env.device)
        self.bodies = robot.body_count
        colours = self.model.shape_color.numpy()
        per_copy = robot.shape_count
        for i, colour in enumerate(colors):
            colours[i * per_copy: i * per_copy + robot_shapes] = colour
        self.model.shape_color.assign(colours)
        self.state = self.model.state()
        self._body_q = wp.to_torch(self.state.body_q).view(self.copies, self.bodies, 7)
        viewer.set_model(self.model)
        viewer.set_world_offsets(self.layout.spacing)
        self._offsets = np.arange(self.copies)[:, None] * np.asarray(self.layout.spacing)[None]
        self._offsets -= self._offsets.mean(axis=0) * np.array([1.0, 1.0, 0.0])  # centred like Newton's grid
        self._target: np.ndarray | None = None

    def log(self, sim_time: float, body_qs: Sequence[torch.Tensor]) -> None:
        """Draw one frame: ``body_qs[i]`` (bodies, 7) are the poses of copy i."""
        for i, body_q in enumerate(body_qs):
            self._body_q[i] = body_q.to(self._body_q.device)
        self._aim_camera()
        self.viewer.begin_frame(sim_time)
        self.viewer.log_state(self.state)
        self.viewer.end_frame()

    def _aim_camera(self) -> None:
        """Look at the copies' midpoint (viewers with a camera only), so a robot that walks off stays in view."""
        if not hasattr(self.viewer, "camera") or self.viewer.camera is None:
            return
        if self._target is not None and not self.layout.follow:
            return
        anchors = self._body_q[:, 0, :3].double().cpu().numpy() + self._offsets
        finite = np.isfinite(anchors).all(axis=1)
        target = anchors[finite].mean(axis=0) if finite.any() else np.zeros(3)
        if not self.layout.follow:
            target[:2] = self._offsets.mean(axis=0)[:2]  # the frame's origin, not where the robots happen to start
        self._target = target
        direction = np.asarray(self.layout.view_direction, dtype=np.float64)
        direction /= np.linalg.norm(direction)
        pos = target - self.layout.distance * direction
        pitch = float(np.degrees(np.arcsin(direction[2])))
        yaw = float(np.degrees(np.arctan2(direction[1], direction[0])))
        self.viewer.set_camera(wp.vec3(*pos.astype(np.float32)), pitch, yaw)

    def close(self) -> None:
        """Close the viewer (a USD or file viewer writes its file here)."""
        self.viewer.close()


class VideoWriter:
    """Collects RGB frames and writes a GIF (Pillow) or an MP4 (ffmpeg) atomically on :meth:`close`."""

    def __init__(self, path: str | Path, fps: int = VIDEO_FPS):
        self.path = Path(path)
        self.fps = fps
        self.frames: list = []

    def add(self, frame: np.ndarray) -> None:
        """Append one (H, W, 3) uint8 frame."""
        from PIL import Image

        image = Image.fromarray(frame)
        # A palette image is a third of the size in memory and is what a GIF stores anyway.
        self.frames.append(image.quantize(colors=255, method=Image.Quantize.MEDIANCUT)
                           if self.path.suffix.lower() == ".gif" else image)

    def close(self) -> Path:
        """Write the file (through a temporary name, so a failure leaves no half-written video)."""
        if not self.frames:
            raise UserError("no frames were rendered")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.stem}.tmp{self.path.suffix}")
        if self.path.suffix.lower() == ".gif":
            self.frames[0].save(tmp, save_all=True, append_images=self.frames[1:], duration=round(1000 / self.fps),
                                loop=0, optimize=False)
        else:
            width, height = self.frames[0].size
            cmd = ["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s",
                   f"{width}x{height}", "-r", str(self.fps), "-i", "-", "-pix_fmt", "yuv420p",
                   "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", str(tmp)]
            data = b"".join(np.asarray(f.convert("RGB")).tobytes() for f in self.frames)
            subprocess.run(cmd, input=data, check=True)
        os.replace(tmp, self.path)
        return self.path


def annotate(frame: np.ndarray, labels: Sequence[str], colors: Sequence[tuple[float, float, float]],
             sim_time: float) -> np.ndarray:
    """Write each copy's name in its colour and the simulated time in the top-left corner of a frame."""
    from PIL import Image, ImageDraw

    image = Image.fromarray(frame)
    draw = ImageDraw.Draw(image)
    x = 6
    for label, colour in zip(labels, colors, strict=False):
        rgb = tuple(int(255 * c) for c in colour)
        draw.text((x, 6), label, fill=rgb)
        x += int(draw.textlength(label)) + 14
    draw.text((x, 6), f"t = {sim_time:5.2f} s", fill=(230, 230, 230))
    return np.asarray(image)


def record(view_env, colors: Sequence[tuple[float, float, float]], steps: int, frame_dt: float,
           advance: Callable[[], Sequence[torch.Tensor]], initial: Sequence[torch.Tensor], viewer: str | None = None,
           output_path: str | None = None, video: str | None = None, video_size: Sequence[int] = (480, 270),
           labels: Sequence[str] = (), progress: bool = True) -> dict:
    """Show or record ``steps`` frames of copies of a robot.

    Args:
        view_env: An environment of the robot (see :class:`RobotView`).
        colors: One colour per copy.
        steps: Frames to advance.
        frame_dt: Simulated time of one frame [s].
        advance: Steps every simulator once and returns each copy's body poses (bodies, 7).
        initial: Each copy's body poses before the first step.
        viewer, output_path: A Newton viewer kind and its output file (usd, file).
        video: Off-screen video path (.gif or .mp4) instead of a viewer.
        video_size: Width and height of the video [px].
        labels: One name per copy, written on the video frames in the copy's colour.

    Returns:
        ``frames`` drawn, ``seconds`` of wall time, and the ``path`` written (or None).
    """
    from tqdm import tqdm

    if video is not None:
        newton_viewer = make_offscreen_viewer(*video_size)
        writer = VideoWriter(video)
        stride = max(1, round(1.0 / (VIDEO_FPS * frame_dt)))
        writer.fps = round(1.0 / (stride * frame_dt))
    else:
        newton_viewer = make_newton_viewer(viewer, output_path, fps=round(1.0 / frame_dt))
        writer, stride = None, 1
    view = RobotView(view_env, newton_viewer, colors)
    start = time.perf_counter()
    frames = 0
    completed = False
    try:
        poses = initial
        for step in tqdm(range(steps + 1), desc="rendering", unit="frame", disable=not progress):
            if step > 0:
                poses = advance()
            if step % stride:
                continue
            view.log(step * frame_dt, poses)
            frames += 1
            if writer is not None:
                writer.add(annotate(newton_viewer.get_frame().numpy(), labels, colors, step * frame_dt))
            elif viewer == "gl":
                if not newton_viewer.is_running():
                    break
                # Real time in a window: the simulation is usually faster than the frame rate.
                time.sleep(max(0.0, start + step * frame_dt - time.perf_counter()))
        completed = True
    finally:
        view.close()
        if not completed and output_path is not None:
            Path(output_path).unlink(missing_ok=True)  # no half-written recording
    path = writer.close() if writer is not None else (Path(output_path) if output_path else None)
    return {"frames": frames, "seconds": time.perf_counter() - start, "path": str(path) if path else None}


def show_passive(env_name: str, model_path: str | Sequence[str] | None, env_mode: str, horizon: int, seed: int,
                 contact_config: int | None = None, device: str = "cpu", initial_states: str = "data",
                 mass_matrix_refresh: str | None = None, robot_variant: str | None = None,
                 control_mode: str | None = None, mirror: bool = False, **view_args) -> dict:
    """Passive motion (zero actions) of the ground truth and, in neural mode, NeRD next to it, from one initial state.

    ``mirror``: NeRD with the mirror option (ours, :class:`~nerd.neural_environment.NeuralEnvironment`).

    The initial state is the one :func:`nerd.evaluation.evaluate_passive` draws first for ``seed`` with one env
    (same ``initial_states`` distribution). ``view_args`` go to :func:`record` (viewer, output_path, video,
    video_size, progress).
    """
    from nerd.envs import make_env
    from nerd.evaluation import initial_state_sampler
    from nerd.neural_environment import NeuralEnvironment

    if env_mode == NEURAL and model_path is None:
        raise UserError("--env-mode neural needs --model-path")

    def build():
        return make_env(env_name, 1, device=device, contact_config=contact_config,
                        mass_matrix_refresh=mass_matrix_refresh, robot_variant=robot_variant,
                        control_mode=control_mode)

    ground_truth = NeuralEnvironment(build(), None, env_mode=GROUND_TRUTH)
    robot = ground_truth.env
    sample = initial_state_sampler(robot, initial_states)
    sims, colors, labels = [ground_truth], [GROUND_TRUTH_COLOR], ["ground truth"]
    if env_mode == NEURAL:
        sims.append(NeuralEnvironment.from_checkpoint(build(), model_path, env_mode=NEURAL, mirror=mirror))
        colors.append(NERD_COLOR)
        labels.append("NeRD")
    initial = sample(1, torch.Generator().manual_seed(seed))
    for sim in sims:
        sim.reset(states=initial)
    actions = torch.zeros(1, ground_truth.action_dim, device=ground_truth.torch_device)

    def advance() -> list[torch.Tensor]:
        for sim in sims:
            sim.step(actions)
        return [sim.get_body_q()[0] for sim in sims]

    return record(robot, colors, horizon, ground_truth.frame_dt, advance,
                  [sim.get_body_q()[0] for sim in sims], labels=labels, **view_args)
