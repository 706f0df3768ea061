"""System identification through the differentiable ground truth (NeuralSim's easy case): fit the scale of one
physical parameter entry so that Featherstone's joint trajectories match a reference.

:func:`fit_parameter_scale` minimises the mean squared joint-coordinate error over the horizon with L-BFGS (strong
Wolfe line search), the gradient coming through the Warp tape of :class:`~nerd.diffsim.GroundTruthRollout`. A local
optimiser: it finds the basin it starts in (NeuralSim's parallel basin hopping for harder cases is not here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nerd.diffsim import GroundTruthRollout


@dataclass
class ScaleFit:
    """Result of :func:`fit_parameter_scale`."""

    scale: float
    """The fitted scale of the parameter entry (1 = the robot's own value)."""
    loss: float
    """Mean squared joint-coordinate error of the fitted rollout [rad² or m²]."""
    evaluations: int
    """Rollouts (each with its gradient) the optimiser used."""


def scaled_parameter(sim: GroundTruthRollout, name: str, index: tuple[int, ...], scale: torch.Tensor) -> torch.Tensor:
    """The robot's parameter ``name`` (one copy's values) with entry ``index`` multiplied by ``scale``,
    differentiable in ``scale``."""
    value = sim.parameter(name)
    mask = torch.zeros_like(value)
    mask[index] = 1.0
    return value * (1.0 + mask * (scale - 1.0))


def fit_parameter_scale(sim: GroundTruthRollout, name: str, index: tuple[int, ...], initial_states: torch.Tensor,
                        torques: torch.Tensor, reference: torch.Tensor, start: float = 1.0,
                        iterations: int = 20) -> ScaleFit:
    """Fit the scale of entry ``index`` of parameter ``name`` (see :data:`nerd.diffsim.PARAMETERS`) so that the
    rollout from ``initial_states`` (N, S) under ``torques`` (N, H, J) matches the joint coordinates of
    ``reference`` (N, H, S), starting from ``start``; at most ``iterations`` rollouts."""
    dof_q = sim.env.dof_q
    scale = torch.tensor(float(start), requires_grad=True)
    optimiser = torch.optim.LBFGS([scale], lr=1.0, max_iter=iterations, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-12, tolerance_change=1e-12)
    count = 0

    def closure() -> torch.Tensor:
        nonlocal count
        count += 1
        optimiser.zero_grad()
        states = sim(initial_states, torques, {name: scaled_parameter(sim, name, index, scale)})
        loss = ((states - reference)[..., :dof_q].double() ** 2).mean()
        loss.backward()
        return loss

    optimiser.step(closure)
    with torch.no_grad():
        states = sim(initial_states, torques, {name: scaled_parameter(sim, name, index, scale)})
        loss = float(((states - reference)[..., :dof_q].double() ** 2).mean())
    return ScaleFit(scale=float(scale.detach()), loss=loss, evaluations=count)
