"""The two simulators every rollout can run in: the one spelling of the mode names (no engine imports).

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

__all__ = ["ENV_MODES", "GROUND_TRUTH", "NEURAL", "EnvMode"]
