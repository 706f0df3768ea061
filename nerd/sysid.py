"""System identification through the differentiable ground truth (NeuralSim): fit physical parameters so that
Featherstone's joint trajectories match a reference.

:func:`fit_parameter_scale` fits the scale of one parameter entry: it minimises the mean squared joint-coordinate
error over the horizon with L-BFGS (strong Wolfe line search), the gradient coming through the Warp tape of
:class:`~nerd.diffsim.GroundTruthRollout`. A local optimiser: it finds the basin it starts in.

For several parameters and starts far from the truth, :func:`descend` runs a batch of local optimisers at once
(one row of parameters per env of a batched rollout) and :func:`parallel_basin_hopping` wraps them in NeuralSim's
global strategy: restart a population of local optimisers around the best solution found so far.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


# ----------------------------------------------------------------------------------------------------
# Several parameters from many starts at once: batched local descent and parallel basin hopping

BatchLoss = Callable[[torch.Tensor], torch.Tensor]
"""Losses of a batch of parameter vectors: (B, P) -> (B,), differentiable; row b's loss depends on row b only
(B envs of one batched rollout, each with its own parameters)."""


@dataclass
class BatchFit:
    """Result of :func:`descend` or :func:`parallel_basin_hopping` for each start."""

    params: torch.Tensor
    """The best parameters found per start, (G, P)."""
    loss: torch.Tensor
    """Their losses, (G,)."""
    evaluations: int
    """Batched loss evaluations (each with its gradient) used; every start used this many."""


def descend(loss_fn: BatchLoss, params: torch.Tensor, iterations: int, lr: float, low: torch.Tensor,
            high: torch.Tensor) -> BatchFit:
    """Adam on every row of ``params`` (B, P) at once, each projected onto the box [low, high] (P,) after a step;
    returns each row's best iterate (Adam is elementwise, so the rows do not interact)."""
    x = params.detach().clone().clamp(low, high).requires_grad_(True)
    optimiser = torch.optim.Adam([x], lr=lr)
    best, best_loss = x.detach().clone(), torch.full((len(x),), math.inf, dtype=torch.float64)
    for _ in range(iterations):
        optimiser.zero_grad()
        loss = loss_fn(x)
        with torch.no_grad():
            better = loss.detach().double() < best_loss
            best[better], best_loss[better] = x.detach()[better], loss.detach().double()[better]
        loss.sum().backward()
        optimiser.step()
        with torch.no_grad():
            x.copy_(x.clamp(low, high))
    with torch.no_grad():
        loss = loss_fn(x).double()
        better = loss < best_loss
        best[better], best_loss[better] = x.detach()[better], loss[better]
    return BatchFit(params=best, loss=best_loss, evaluations=iterations + 1)


def parallel_basin_hopping(loss_fn: BatchLoss, starts: torch.Tensor, chains: int, hops: int, iterations: int,
                           lr: float, sigma: float, low: torch.Tensor, high: torch.Tensor,
                           generator: torch.Generator) -> BatchFit:
    """NeuralSim's parallel (monotonic) basin hopping, for each of G starts (G, P) independently.

    Each start runs ``chains`` local optimisers (:func:`descend`, ``iterations`` steps each) in parallel. The
    first hop starts them at the start and at ``sigma``-perturbations of it (Gaussian, in parameter units, kept in
    the box); every later hop restarts them around the best solution the start has found so far (one chain
    exactly at it), which moves only when a hop finds a lower loss. ``loss_fn`` sees (G * chains, P) rows, a
    start's chains adjacent."""
    g, p = starts.shape
    best, best_loss = starts.detach().clone(), torch.full((g,), math.inf, dtype=torch.float64)
    centre, evaluations = starts.detach().clone(), 0
    for _ in range(hops):
        noise = sigma * torch.randn(g, chains, p, generator=generator)
        noise[:, 0] = 0.0
        x = (centre[:, None, :] + noise).reshape(g * chains, p)
        fit = descend(loss_fn, x, iterations, lr, low, high)
        evaluations += fit.evaluations
        loss = fit.loss.view(g, chains)
        k = loss.argmin(dim=1)
        hop_loss, hop_best = loss[torch.arange(g), k], fit.params.view(g, chains, p)[torch.arange(g), k]
        better = hop_loss < best_loss
        best[better], best_loss[better] = hop_best[better], hop_loss[better]
        centre = best.clone()
    return BatchFit(params=best, loss=best_loss, evaluations=evaluations)
