"""The names that configs and command lines choose from, spelled once and importable without the engine.

The two simulators every rollout can run in, the initial states a passive evaluation starts from, the robots, and
the ground-truth and data-generation options that the entry points offer as choices. This module imports no engine
(Newton, Warp, torch), so that ``--help`` and argument errors come without their start-up time.

``"ground-truth"`` steps the analytical Newton solver, ``"neural"`` the learned :class:`~nerd.integrator.NeRDIntegrator`
(see :class:`~nerd.neural_environment.NeuralEnvironment`). Configs, command-line choices and result tables use these
strings.
"""

from __future__ import annotations

from typing import Literal, get_args

from nerd.errors import UserError

EnvMode = Literal["neural", "ground-truth"]
"""Type of a mode name, for config dataclasses (validated on load)."""
ENV_MODES: tuple[str, ...] = get_args(EnvMode)
"""Every mode name, neural first."""
NEURAL, GROUND_TRUTH = ENV_MODES

InitialStates = Literal["task", "data", "limits"]
"""Type of an initial-state distribution name of a passive evaluation (see :mod:`nerd.evaluation`)."""
INITIAL_STATES: tuple[str, ...] = get_args(InitialStates)
"""Initial-state distributions of a passive evaluation, the default first: ``"task"`` the robot's random reset (the
release's protocol), ``"data"`` the data-generation sampler, ``"limits"`` ours: starts near a joint limit, moving
slowly into it (robots with such a sampler: Cartpole's rail)."""

ENV_NAMES = ("Cartpole", "PendulumWithContact", "Ant", "Anymal", "Franka", "CubeToss", "Humanoid")
"""Every robot, by the name :func:`nerd.envs.env_class` builds it under."""

SOLVERS = ("featherstone", "xpbd", "mujoco")
"""Ground-truth solvers by name. Featherstone is the paper's ground truth and the default; ``xpbd`` is experimental
(validated on the Cartpole only); ``mujoco`` needs the MuJoCo Warp backend, which this project does not install."""

MASS_MATRIX_REFRESH = ("frame", "substep")
"""When Featherstone rebuilds (and factorises) the joint-space mass matrix: ``"frame"`` once per frame, at its
first substep, as the release did (its base environment set ``update_mass_matrix_every = sim_substeps``; the
paper's data and models come from this dynamics), or ``"substep"`` at every substep, Newton's default and the
more accurate integration. Bias forces, contacts and limits are evaluated at every substep either way."""

CONTACT_FRICTION = ("coulomb", "huber")
"""Friction law of the ground contacts: ``"coulomb"`` Newton 1.8's, viscous kf·|vt| capped at
mu·|Fn| (the solver evaluates it), or ``"huber"`` warp.sim's Huber-smoothed law
(:func:`nerd.envs.contacts.eval_ground_contact_forces`; mostly viscous, friction can exceed mu·|Fn| several-fold
around 0.5 m/s). The normal spring-damper is the same in both. The release's published Ant policies reproduce the
paper's ground-truth rewards under ``"coulomb"`` (within 7 %) and not under ``"huber"`` (−11 % and −23 %), see
docs/rl.md, so Coulomb is every robot's default."""

TORQUE_SCALES = ("full", "log-uniform", "saturating")
"""Random torques of data generation (see :class:`nerd.generation.GenerationConfig`)."""


def check_env_name(name: str) -> str:
    """``name`` if it names a robot; otherwise a UserError listing the valid names."""
    if name not in ENV_NAMES:
        raise UserError(f"unknown env name '{name}'; valid names: {', '.join(ENV_NAMES)}")
    return name


__all__ = ["CONTACT_FRICTION", "ENV_MODES", "ENV_NAMES", "GROUND_TRUTH", "INITIAL_STATES", "MASS_MATRIX_REFRESH",
           "NEURAL", "SOLVERS", "TORQUE_SCALES", "EnvMode", "InitialStates", "check_env_name"]
