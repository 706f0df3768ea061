"""Open-loop trajectory optimisation of a task through a differentiable simulator (NeuralSim's gradient-based
control).

:func:`optimise_actions` finds an action sequence per initial state by gradient ascent on a task's return, the
gradient coming through either simulator of :mod:`nerd.diffsim`: Newton's Featherstone on a Warp tape
(:class:`~nerd.diffsim.GroundTruthRollout`) or NeRD through torch autograd (:func:`~nerd.diffsim.rollout_neural`).
:func:`episode_return` scores a rollout as the RL environment does, so that a plan found in one simulator can be
played in the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from nerd.envs.environment import Environment
from nerd.rl.tasks.base import Task

Rollout = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(initial states (N, S), joint torques (N, H, J)) -> states after each frame (N, H, S), differentiable."""


@dataclass
class OpenLoopPlan:
    """Result of :func:`optimise_actions`."""

    actions: torch.Tensor
    """The best action sequence found per initial state, (N, H, A), in [-1, 1]."""
    returns: torch.Tensor
    """Its return in the simulator it was optimised in (rewards summed over the horizon, no termination), (N,)."""
    history: list[float] = field(default_factory=list)
    """The mean return of each iteration's plan."""
    seconds: float = 0.0
    """Wall-clock time of the optimisation."""


def joint_torques(env: Environment, actions: torch.Tensor) -> torch.Tensor:
    """The robot controller's torques (N, H, J) of actions (N, H, A) (a torque-controlled robot's
    ``compute_torques`` frame by frame)."""
    n, h, a = actions.shape
    return env.compute_torques(actions.reshape(n * h, a)).reshape(n, h, -1)


def step_rewards(task: Task, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The task's reward (N, H) of each frame's state (N, H, S) under its actions (N, H, A)."""
    n, h, s = states.shape
    return task.rewards(states.reshape(n * h, s), actions.reshape(n * h, -1)).view(n, h)


def episode_return(task: Task, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Return (N,) of each rollout as the RL environment counts it: rewards summed up to and including the first
    frame whose state terminates the episode."""
    n, h, s = states.shape
    rewards = step_rewards(task, states, actions)
    ended = task.terminations(states.reshape(n * h, s)).view(n, h)
    before = torch.cumsum(ended.long(), dim=1) - ended.long()  # terminations strictly before each frame
    return (rewards * (before == 0)).sum(dim=1)


def optimise_actions(rollout: Rollout, env: Environment, task: Task, initial_states: torch.Tensor, horizon: int,
                     iterations: int, lr: float, window: int | None = None, progress: bool = False) -> OpenLoopPlan:
    """Adam on unconstrained parameters u (N, H, A), actions tanh(u), maximising each initial state's return
    (summed rewards; rows are independent).

    With ``window=None`` every step optimises the whole horizon (``iterations`` steps). Through a long horizon of a
    chaotic system the gradient is dominated by late frames and the ascent fails; with ``window`` frames the plan is
    built front to back instead, as a receding horizon run offline: ``iterations`` steps on the rewards of frames
    [t, t + window) with the actions before t fixed, then t advances by window // 2. The result is still one
    open-loop sequence. Returns the plan and its return in the simulator it was optimised in.
    """
    from tqdm import tqdm

    n = initial_states.shape[0]
    window = horizon if window is None else min(window, horizon)
    stride = horizon if window == horizon else max(1, window // 2)
    starts = list(range(0, horizon - window + stride, stride)) if window < horizon else [0]
    u = torch.zeros(n, horizon, env.action_dim, dtype=initial_states.dtype)
    history, started = [], time.perf_counter()
    with tqdm(total=len(starts) * iterations, desc="trajectory optimisation", unit="iteration",
              disable=not progress) as bar:
        for first in starts:
            end = min(first + window, horizon)
            free = u[:, first:end].clone().requires_grad_(True)
            optimiser = torch.optim.Adam([free], lr=lr)
            best, best_return = free.detach().clone(), torch.full((n,), -torch.inf, dtype=initial_states.dtype)
            for _ in range(iterations):
                optimiser.zero_grad()
                actions = torch.tanh(torch.cat([u[:, :first], free], dim=1))
                rewards = step_rewards(task, rollout(initial_states, joint_torques(env, actions)), actions)
                returns = rewards[:, first:].sum(dim=1)
                with torch.no_grad():
                    better = returns.detach() > best_return
                    best[better], best_return[better] = free.detach()[better], returns.detach()[better]
                history.append(float(rewards.detach().sum(dim=1).mean()))
                (-returns.sum()).backward()
                optimiser.step()
                bar.update()
            u[:, first:end] = best
    actions = torch.tanh(u)
    with torch.no_grad():
        returns = step_rewards(task, rollout(initial_states, joint_torques(env, actions)), actions).sum(dim=1)
    return OpenLoopPlan(actions=actions, returns=returns, history=history, seconds=time.perf_counter() - started)
