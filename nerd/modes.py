"""The two simulators every rollout can run in, and the initial states a passive evaluation starts from: the one
spelling of these names (no engine imports).

``"ground-truth"`` steps the analytical Newton solver, ``"neural"`` the learned :class:`~nerd.integrator.NeRDIntegrator`
(see :class:`~nerd.neural_environment.NeuralEnvironment`). Configs, command-line choices and result tables use these
strings.
"""

from __future__ import annotations

from typing import Literal, get_args

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

__all__ = ["ENV_MODES", "GROUND_TRUTH", "INITIAL_STATES", "NEURAL", "EnvMode", "InitialStates"]
