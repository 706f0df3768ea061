"""RL tasks, one module per robot, and the registry that builds them by (robot, task) name."""

from __future__ import annotations

import torch

from nerd.errors import UserError
from nerd.rl.tasks.ant import AntRun, AntSpin, AntSpinTrack
from nerd.rl.tasks.anymal import AnymalForwardWalk, AnymalSideWalk
from nerd.rl.tasks.base import Task
from nerd.rl.tasks.cartpole import CartpoleSwingUp
from nerd.rl.tasks.franka import FrankaReach
from nerd.rl.tasks.humanoid import HumanoidRun

TASKS: dict[tuple[str, str], type[Task]] = {
    (cls.robot, cls.name): cls
    for cls in (CartpoleSwingUp, AntRun, AntSpin, AntSpinTrack, AnymalForwardWalk, AnymalSideWalk, FrankaReach,
                HumanoidRun)
}
"""Task classes by (robot, task name)."""


def task_class(robot: str, task: str) -> type[Task]:
    """The task class registered for ``robot``; the error lists the valid (robot, task) pairs."""
    try:
        return TASKS[(robot, task)]
    except KeyError:
        valid = ", ".join(f"{r}/{t}" for r, t in TASKS)
        raise UserError(f"unknown task '{task}' for robot '{robot}'; valid tasks: {valid}") from None


def make_task(robot: str, task: str, num_envs: int, device: str | torch.device = "cpu") -> Task:
    """Build task ``task`` of ``robot`` for ``num_envs`` envs."""
    return task_class(robot, task)(num_envs, device)


__all__ = ["TASKS", "Task", "make_task", "task_class"]
