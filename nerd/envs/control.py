"""Joint controllers shared by the robots: the joint-position PD law of the release's position-control envs.

Both robots with a PD controller (ANYmal's ``AnymalJointPositionControl``, Franka's ``joint_position_control``)
compute τ = Kp·(target − q) − Kd·q̇ once per frame from the start-of-frame state and hold it over the substeps;
they differ only in the target (ANYmal: the default pose + 0.5·a; Franka: the current q + 0.03125·a) and in the
torque clip (Franka clips to its torque limits, ANYmal does not).
"""

from __future__ import annotations

import torch


def joint_pd_torques(target: torch.Tensor, q: torch.Tensor, qd: torch.Tensor, kp: torch.Tensor | float,
                     kd: torch.Tensor | float, limits: torch.Tensor | None = None) -> torch.Tensor:
    """PD torques τ = Kp·(target − q) − Kd·q̇, clipped to ±``limits`` when given.

    Args:
        target, q: (N, J) target and current joint positions [rad].
        qd: (N, J) joint rates [rad/s].
        kp, kd: Gains, broadcastable to (N, J) [N·m/rad], [N·m·s/rad].
        limits: (J,) or (N, J) torque bounds [N·m], or None for no clip.

    Returns:
        (N, J) joint torques [N·m].
    """
    torques = kp * (target - q) - kd * qd
    if limits is None:
        return torques
    return torch.maximum(torch.minimum(torques, limits), -limits)
