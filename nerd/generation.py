"""Dataset generation: roll out the ground-truth simulator from random states under random torques.

Each batch resets all N envs to states drawn by the robot's data sampler (the release's; its task reset with our
``initial_states="task"``), rolls them out for T frames with white-noise torques (or none with ``passive``), and
appends the batch's finite trajectories to the HDF5 file. Robots whose data goes through a controller
(``random_control = "actions"``, ANYmal's PD law) instead draw random actions and controller parameters every
frame; the file then holds the actions and the torques the controller produced (``joint_acts``); ``passive`` gives
them zero actions at the controller's default gains. Trajectories that contain NaN/inf or a coordinate beyond 1e5
are dropped and counted.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import newton
import numpy as np
import torch
import warp as wp
from tqdm import tqdm

from nerd.datasets.hdf5 import TrajectoryWriter
from nerd.envs import make_env
from nerd.envs.environment import uniform
from nerd.errors import RolloutDivergedError, UserError
from nerd.evaluation import initial_state_sampler
from nerd.features import signature_of_env
from nerd.modes import INITIAL_STATES, TORQUE_SCALES, InitialStates
from nerd.resources import check_disk, check_memory

LOG_UNIFORM_DECADES = 2.0
"""``"log-uniform"`` draws each trajectory's torque factor as 10^U[-LOG_UNIFORM_DECADES, 0]."""
SATURATING_GAIN = 2.0
"""``"saturating"`` multiplies the white noise by this and clips it to the box: with 2, half of the torques sit
at the limit and the mean |torque| is 0.75 of it (what the Ant's run policies apply,
studies/torque_usage/torque_usage.py)."""

DIVERGED_THRESHOLD = 1.0e5
"""A trajectory with any state coordinate beyond this magnitude is treated as diverged and dropped."""


@dataclass
class GenerationConfig:
    """Settings of one dataset generation run (stored in the file's attributes)."""

    env_name: str
    """Robot name, e.g. ``Cartpole``."""
    num_transitions: int
    """Transitions to generate; rounded up to whole trajectories."""
    trajectory_length: int = 100
    """Frames per trajectory."""
    num_envs: int = 2048
    """Parallel envs per batch."""
    seed: int = 0
    """Seed of the initial states, torques and ground planes."""
    passive: bool = False
    """Zero torques instead of white noise (zero actions through the controller for ``"actions"`` robots)."""
    contact_config: int | None = None
    """Fixed ground configuration (pendulum); None draws a random plane per trajectory for the pendulum."""
    solver: str | None = None
    """Ground-truth solver; None uses the robot's default (Featherstone)."""
    mass_matrix_refresh: str | None = None
    """Featherstone's mass-matrix refresh, ``"frame"`` or ``"substep"``; None for the robot's default (frame)."""
    contact_friction: str | None = None
    """Ground-contact friction law, ``"coulomb"`` or ``"huber"``; None for the robot's default."""
    robot_variant: str | None = None
    """Variant of robots with several (Anymal: ``"physical"``, ``"release"``; CubeToss: ``"sim"``, ``"real"``); None
    for the default. Recorded in the file's attributes (the robot signature's ``robot_variant``)."""
    control_mode: str | None = None
    """Controller of robots with several (Anymal, Franka); it matters for ``random_control = "actions"`` robots
    only (the others' data bypasses the controller); None for the robot's default."""
    pd_gains: str | None = None
    """Data-generation gain box of robots whose data goes through a PD law (Anymal: ``"release"``, the default,
    or our ``"damped"``); None for the robot's default."""
    torque_scale: str = "full"
    """How white-noise torques are scaled: ``"full"`` (the release: uniform over the robot's whole torque box) or
    our ``"log-uniform"`` (each trajectory's box is shrunk by its own factor 10^U[-2, 0], so that the data also
    covers the small torques and slow motion that a task's controller produces) or our ``"saturating"`` (the white
    noise times :data:`SATURATING_GAIN`, clipped to the box: torques at the limit, as a running gait's)."""
    torque_hold_frames: int = 1
    """Temporal correlation of the random torques: each trajectory draws a mean hold time L log-uniformly in
    [1, torque_hold_frames] frames, and each joint keeps its torque until a redraw, which happens with
    probability 1/L per frame. 1 (the release's) redraws every torque every frame: white noise."""
    through_controller: bool = False
    """Draw the random noise as policy actions, uniform in [−1, 1] (``torque_scale`` and ``torque_hold_frames``
    act on them), and pass them through the robot's controller each frame (:meth:`compute_torques` of its
    ``control_mode``) instead of drawing torques (our option). For the Franka's joint-position PD the torques then
    carry the controller's damping, −Kd·q̇, as a position-controlled policy's do; white-noise torques never
    correlate with the joint rates. Robots whose data already goes through their controller (ANYmal) have no use
    for it."""
    initial_states: InitialStates = "data"
    """Where trajectories start (:data:`~nerd.modes.INITIAL_STATES`): ``"data"`` (the release: the robot's
    data-generation sampler) or our ``"task"`` (the robot's task reset, the states that its RL tasks and
    the release's passive evaluation start from; a directory holding a file of each trains on the mix) or our
    ``"limits"`` (starts near a joint limit, moving slowly into it: the slow bounces off Cartpole's rail stops,
    rare in the other two, see docs/notebook/accuracy.md)."""
    compression: str | None = "lzf"
    """HDF5 compression filter: ``"lzf"`` (about half the size, a few % slower), ``"gzip"`` or None."""
    model_values: dict[str, list[float]] | None = None
    """Other physics than the robot's own (our option): values of its Newton model arrays, one copy's each, e.g.
    ``{"joint_damping": [20.0, 10.0]}`` (:meth:`~nerd.envs.environment.Environment.set_model_values`); None keeps
    the robot's. Recorded in the file's ``generator_settings``; the robot signature stays the robot's."""

    def __post_init__(self) -> None:
        if self.num_transitions < 1:
            raise UserError(f"--num-transitions must be positive, got {self.num_transitions}")
        if self.trajectory_length < 1:
            raise UserError(f"--trajectory-length must be positive, got {self.trajectory_length}")
        if self.num_envs < 1:
            raise UserError(f"--num-envs must be positive, got {self.num_envs}")
        if self.torque_scale not in TORQUE_SCALES:
            raise UserError(f"--torque-scale must be one of {', '.join(TORQUE_SCALES)}, got {self.torque_scale!r}")
        if self.torque_scale != "full" and self.passive:
            raise UserError("--torque-scale scales random torques; --passive has none")
        if self.torque_hold_frames < 1:
            raise UserError(f"--torque-hold-frames must be at least 1, got {self.torque_hold_frames}")
        if self.torque_hold_frames > 1 and self.passive:
            raise UserError("--torque-hold-frames holds random torques; --passive has none")
        if self.through_controller and self.passive:
            raise UserError("--through-controller passes random actions through the controller; --passive has none")
        if self.initial_states not in INITIAL_STATES:
            raise UserError(f"--initial-states must be one of {', '.join(sorted(INITIAL_STATES))}, "
                            f"got {self.initial_states!r}")
        if self.compression not in ("lzf", "gzip", None):
            raise UserError(f"--compression must be lzf, gzip or none, got {self.compression!r}")


@dataclass
class GenerationSummary:
    """What a generation run produced."""

    path: str
    num_trajectories: int
    num_transitions: int
    num_dropped: int
    seconds: float

    @property
    def transitions_per_second(self) -> float:
        """Kept transitions per wall-clock second."""
        return self.num_transitions / max(self.seconds, 1e-9)


def dataset_attrs(env) -> dict[str, Any]:
    """The file attributes that describe ``env``'s robot and simulator in every dataset of it: the robot signature
    (what a model trained on the file is checked against, written from this one place), the engine versions, the
    solver settings and the names of the state and torque coordinates."""
    return {
        **signature_of_env(env).to_dict(), "state_dim": env.state_dim,
        "engine": "newton", "newton_version": newton.__version__, "warp_version": wp.config.version,
        "solver": env.solver_name, "mass_matrix_refresh": env.mass_matrix_refresh,
        "contact_friction": env.contact_friction, "frame_dt": env.frame_dt, "sim_substeps": env.sim_substeps,
        "state_names": env.state_names(), "joint_act_names": env.joint_act_names(),
    }


def gravity_directions(env, n: int) -> torch.Tensor:
    """(n, 3) unit gravity direction of ``env``'s world, zero for a robot simulated without gravity (Franka)."""
    return torch.tensor([0.0, 0.0, math.copysign(1.0, env.gravity) if env.gravity else 0.0],
                        device=env.torch_device).expand(n, 3)


def dataset_field_shapes(env) -> dict[str, tuple[int, ...]]:
    """Per-step shape of every dataset field for ``env``'s robot (``actions`` where a controller sits between)."""
    c = env.contact_count
    shapes = {
        "states": (env.state_dim,), "next_states": (env.state_dim,), "joint_acts": (env.act_dim,),
        "contact_normals": (c, 3), "contact_points_0": (c, 3), "contact_points_1": (c, 3),
        "contact_depths": (c,), "contact_thicknesses": (c,), "gravity_dir": (3,), "root_body_q": (7,),
    }
    if env.random_control == "actions":
        shapes["actions"] = (env.action_dim,)
    return shapes


def generate_dataset(cfg: GenerationConfig, path: str | Path, device: str = "cpu", progress: bool = True,
                     overwrite: bool = False) -> GenerationSummary:
    """Generate a trajectory dataset into ``path`` (HDF5, see :mod:`nerd.datasets.hdf5`).

    The file appears under ``path`` only once generation has finished; an error or an interruption removes the
    partial file. An existing file at ``path`` is replaced only with ``overwrite``, also one that another process
    finished meanwhile.
    """
    num_trajectories = math.ceil(cfg.num_transitions / cfg.trajectory_length)
    num_envs = min(cfg.num_envs, num_trajectories)
    n, T = num_envs, cfg.trajectory_length
    # Sizes first, from a one-env copy of the robot, so that a 10^9-sized request is refused before it allocates.
    field_shapes = dataset_field_shapes(make_env(cfg.env_name, 1, contact_config=cfg.contact_config,
                                          robot_variant=cfg.robot_variant))
    row_bytes = 4 * sum(math.prod(shape) for shape in field_shapes.values())  # float32, one transition
    check_memory(3 * n * T * row_bytes, f"generating with {n} envs x {T} steps", device,
                 "lower --num-envs or --trajectory-length")
    # lzf and gzip roughly halve these files.
    check_disk(num_trajectories * T * row_bytes * (0.5 if cfg.compression else 1.0),
               f"a dataset of {num_trajectories * T:,} transitions", Path(path).parent, "lower --num-transitions")
    env = make_env(cfg.env_name, num_envs, device=device, solver=cfg.solver, contact_config=cfg.contact_config,
                   mass_matrix_refresh=cfg.mass_matrix_refresh, contact_friction=cfg.contact_friction,
                   robot_variant=cfg.robot_variant, control_mode=cfg.control_mode)
    env.set_model_values(cfg.model_values or {})
    _check_robot_option("--pd-gains", cfg.pd_gains, env.pd_gain_boxes, f"{cfg.env_name} has the gain boxes",
                        f"{cfg.env_name}'s data does not go through a PD controller (only Anymal's does)")
    if ((cfg.torque_scale != "full" or cfg.torque_hold_frames > 1 or cfg.through_controller)
            and env.random_control == "actions"):
        flag = (f"--torque-scale {cfg.torque_scale}" if cfg.torque_scale != "full"
                else f"--torque-hold-frames {cfg.torque_hold_frames}" if cfg.torque_hold_frames > 1
                else "--through-controller")
        raise UserError(f"{flag}: {cfg.env_name}'s data goes through its controller (random actions), not random "
                        "torques")
    random_planes = cfg.contact_config is None and bool(env.ground_plane_rules)
    generator = torch.Generator().manual_seed(cfg.seed)
    sample_states = initial_state_sampler(env, cfg.initial_states)
    # The robot signature is what a model trained on the file is checked against; it is written from one place.
    attrs = {
        **dataset_attrs(env), "trajectory_length": T, "seed": cfg.seed, "generator_settings": asdict(cfg),
        "random_ground_planes": random_planes, "torque_scale": "" if cfg.passive else cfg.torque_scale,
        "torque_hold_frames": cfg.torque_hold_frames, "initial_states": cfg.initial_states,
        "ground_plane_rule": env.ground_plane_rules[0] if random_planes else "",
    }
    buffers = {name: torch.empty(T, n, *shape, device=env.torch_device) for name, shape in field_shapes.items()}
    gravity = gravity_directions(env, n)
    writer = TrajectoryWriter(path, field_shapes, T, attrs, compression=cfg.compression, overwrite=overwrite)
    kept = dropped = 0
    start = time.perf_counter()
    try:
        with tqdm(total=num_trajectories * T, unit="transition", disable=not progress, desc=cfg.env_name) as bar:
            while kept < num_trajectories:
                # The bar counts the transitions that will be written: a batch's last trajectories beyond the target
                # are not counted, and dropped (diverged) ones are taken back once the batch is checked.
                counted = min(n, num_trajectories - kept)
                env.reset(states=sample_states(n, generator))
                if random_planes:
                    contacts = env.get_contacts()
                    normals, points = env.sample_ground_planes(
                        contacts["contact_points_0"], contacts["contact_thicknesses"], env.get_root_body_q()[:, :3],
                        generator,
                    )
                    env.set_ground_planes(normals, points)
                torque_noise = _TorqueNoise(env, cfg, n, generator)
                for t in range(T):
                    record_frame_inputs(env, buffers, t, gravity, None if t == 0 else buffers["next_states"][t - 1])
                    if env.random_control == "actions":
                        # Random actions through the robot's controller (randomised per frame); record both.
                        if not cfg.passive:
                            env.randomize_controller(generator, cfg.pd_gains)
                        actions = (torch.zeros(n, env.action_dim, device=env.torch_device) if cfg.passive
                                   else env.sample_random_actions(n, generator))
                        env.check_actions(actions)
                        torques = env.compute_torques(actions)
                        # An env whose state diverged (stiff random gains held over a frame can do that) has
                        # non-finite torques; it is stepped with zeros and its trajectory dropped below, as the
                        # release dropped it, instead of stopping the whole batch.
                        env.step_with_joint_act(torch.nan_to_num(torques, nan=0.0, posinf=0.0, neginf=0.0),
                                                check_finite=False)
                        buffers["actions"][t] = actions
                    else:
                        torques = (torch.zeros(n, env.act_dim, device=env.torch_device) if cfg.passive
                                   else torque_noise.next())
                        # Trajectories that diverge are dropped below, not raised.
                        env.step_with_joint_act(torques, check_finite=False)
                    buffers["joint_acts"][t] = torques
                    buffers["next_states"][t] = env.get_states()
                    bar.update(counted)
                batch = {name: buf.transpose(0, 1).cpu().numpy() for name, buf in buffers.items()}
                finite = finite_trajectories(batch)
                dropped += int((~finite).sum())
                keep = np.flatnonzero(finite)[: num_trajectories - kept]
                if len(keep) == 0:
                    raise RolloutDivergedError(
                        f"{cfg.env_name}: every trajectory of a batch diverged; check the sampler ranges")
                writer.append({name: values[keep] for name, values in batch.items()})
                kept += len(keep)
                bar.update((len(keep) - counted) * T)  # <= 0: the batch's dropped trajectories
        seconds = time.perf_counter() - start
        out = writer.close({"num_dropped_trajectories": dropped, "generation_seconds": seconds})
    except BaseException:
        writer.abort()
        raise
    return GenerationSummary(str(out), kept, kept * T, dropped, seconds)


class _TorqueNoise:
    """The random torques of one batch of trajectories, frame after frame (:class:`GenerationConfig`'s
    ``torque_scale``, ``torque_hold_frames`` and ``through_controller``). The release's settings draw nothing beyond
    its white noise, so that its data stays what the same seed gave before the options existed."""

    def __init__(self, env, cfg: GenerationConfig, n: int, generator: torch.Generator):
        self.env, self.n, self.generator = env, n, generator
        self.through_controller = cfg.through_controller
        self.factor = None  # (n, 1) per-trajectory box factor of "log-uniform"
        if cfg.torque_scale == "log-uniform":
            self.factor = (10.0 ** (LOG_UNIFORM_DECADES * (torch.rand(n, 1, generator=generator) - 1.0))
                           ).to(env.torch_device)
        self.box = None  # (act_dim,) half-widths that "saturating" clips to
        if cfg.torque_scale == "saturating":
            self.box = torch.tensor([1.0] * env.action_dim if cfg.through_controller else env.random_torque_box,
                                    device=env.torch_device)
        self.redraw_probability = None  # (n, 1) per-trajectory 1 / L of the hold
        if cfg.torque_hold_frames > 1:
            hold = cfg.torque_hold_frames ** torch.rand(n, 1, generator=generator)  # log-uniform in [1, L_max]
            self.redraw_probability = 1.0 / hold
        self.held: torch.Tensor | None = None

    def _draw(self) -> torch.Tensor:
        """Fresh white noise: actions (n, action_dim) in [−1, 1] through the controller, else torques."""
        if self.through_controller:
            a = self.env.action_dim
            return uniform([-1.0] * a, [1.0] * a, self.n, self.generator).to(self.env.torch_device)
        return self.env.sample_random_torques(self.n, self.generator)

    def next(self) -> torch.Tensor:
        """The torques (n, act_dim) of the next frame (through the controller: from the current state)."""
        fresh = self._draw()
        if self.factor is not None:
            fresh = fresh * self.factor
        elif self.box is not None:
            fresh = torch.clamp(fresh * SATURATING_GAIN, -self.box, self.box)
        if self.redraw_probability is not None:
            if self.held is not None:
                # Drawn on the CPU, as every random number of generation, so a seed gives the same data anywhere.
                redraw = torch.rand(fresh.shape, generator=self.generator) < self.redraw_probability
                fresh = torch.where(redraw.to(fresh.device), fresh, self.held)
            self.held = fresh
        return self.env.compute_torques(fresh) if self.through_controller else fresh


def _check_robot_option(flag: str, value: str | None, names: tuple[str, ...], has: str, has_none: str) -> None:
    """A robot-specific generation option (None: the robot's default) must name one of the robot's ``names``;
    the error lists them after ``has``, or says ``has_none`` for a robot without any."""
    if value is not None and value not in names:
        raise UserError(f"{flag} {value}: " + (f"{has} {', '.join(names)}" if names else has_none))


def record_frame_inputs(env, buffers: dict[str, torch.Tensor], t: int, gravity: torch.Tensor,
                        states: torch.Tensor | None) -> None:
    """Write frame ``t``'s state, anchor pose, gravity and contacts of every env into ``buffers`` (T, n, ...)."""
    # The state at step t is the previous step's next state; read it from the simulator only at t = 0.
    buffers["states"][t] = env.get_states() if states is None else states
    buffers["root_body_q"][t] = env.get_root_body_q()
    buffers["gravity_dir"][t] = gravity
    if env.contact_count:
        for name, value in env.get_contacts().items():
            buffers[name][t] = value


def finite_trajectories(batch: dict[str, np.ndarray]) -> np.ndarray:
    """(n,) mask of trajectories whose states stay finite and below the divergence threshold."""
    ok = np.ones(batch["states"].shape[0], dtype=bool)
    for name in ("states", "next_states"):
        values = batch[name].reshape(len(ok), -1)
        ok &= np.isfinite(values).all(axis=1) & (np.abs(values) < DIVERGED_THRESHOLD).all(axis=1)
    return ok
