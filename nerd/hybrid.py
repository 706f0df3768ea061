"""Neural augmentation inside the analytical step (NeuralSim's hybrid simulator).

A small network adds a joint torque, computed from the state at the start of each frame, to the torques that
Newton's Featherstone integrates over that frame (:func:`hybrid_rollout`). The frames are chained in torch through
one-frame :class:`~nerd.diffsim.GroundTruthRollout` calls, so the loss of a whole trajectory reaches the network's
weights (and any physical parameter) through the Warp tape.

:class:`JointTorqueAugmentation` keeps one small MLP per actuated joint, so that the first layer's weights of each
input, per output joint, form a group: a sparse-group-lasso penalty on them (:meth:`~JointTorqueAugmentation.
sparse_group_lasso`) drives inputs a joint's torque does not need to zero, and :meth:`~JointTorqueAugmentation.
input_importance` shows which inputs each joint's torque uses (NeuralSim's way of finding where an analytical model
needs augmenting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from nerd.diffsim import GroundTruthRollout


class JointTorqueAugmentation(nn.Module):
    """Joint torques (N, J) from states (N, S): one MLP per joint over the scaled state ``states / input_scale``.

    The last layer starts at zero, so an untrained augmentation adds nothing.
    """

    def __init__(self, state_dim: int, joints: int, hidden: Sequence[int] = (32, 32),
                 input_scale: torch.Tensor | None = None, output_scale: float = 1.0):
        super().__init__()
        self.nets = nn.ModuleList()
        for _ in range(joints):
            layers, width = [], state_dim
            for h in hidden:
                layers += [nn.Linear(width, h), nn.Tanh()]
                width = h
            last = nn.Linear(width, 1)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
            self.nets.append(nn.Sequential(*layers, last))
        scale = torch.ones(state_dim) if input_scale is None else torch.as_tensor(input_scale, dtype=torch.float32)
        if scale.shape != (state_dim,):
            raise ValueError(f"input_scale must have shape ({state_dim},), got {tuple(scale.shape)}")
        self.register_buffer("input_scale", scale)
        self.output_scale = float(output_scale)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        x = (states / self.input_scale.to(states)).to(self.input_scale.dtype)
        return self.output_scale * torch.cat([net(x) for net in self.nets], dim=1).to(states.dtype)

    def first_layers(self) -> list[torch.Tensor]:
        """Each joint's first-layer weights, (hidden, S): column i holds input i's group."""
        return [net[0].weight for net in self.nets]

    def input_importance(self) -> torch.Tensor:
        """(J, S): the norm of each input's group of first-layer weights, per output joint."""
        return torch.stack([w.detach().norm(dim=0) for w in self.first_layers()])

    def sparse_group_lasso(self, group_weight: float, l1_weight: float) -> torch.Tensor:
        """``group_weight`` x the sum of the groups' norms + ``l1_weight`` x the first layers' absolute weights."""
        groups = sum(w.norm(dim=0).sum() for w in self.first_layers())
        l1 = sum(w.abs().sum() for w in self.first_layers())
        return group_weight * groups + l1_weight * l1


def hybrid_rollout(sim: GroundTruthRollout, augmentation: nn.Module | None, initial_states: torch.Tensor,
                   torques: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """States (N, H, S) after each frame of Featherstone with ``augmentation(state)`` added to the frame's joint
    torques ``torques`` (N, H, J), held over the frame's substeps like them; differentiable w.r.t. the initial
    states, the torques, the augmentation's weights and ``params``. ``sim`` must step the N envs of
    ``initial_states``. Without an augmentation it is the analytical model (``sim`` over H frames, frame by
    frame)."""
    states, out = initial_states, []
    for k in range(torques.shape[1]):
        tau = torques[:, k] if augmentation is None else torques[:, k] + augmentation(states)
        states = sim(states, tau[:, None], params)[:, 0]
        out.append(states)
    return torch.stack(out, dim=1)


__all__ = ["JointTorqueAugmentation", "hybrid_rollout"]
