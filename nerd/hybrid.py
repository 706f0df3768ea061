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

:class:`ContactForceAugmentation` sits deeper, inside every substep: a tiny network evaluated in a Warp kernel for
each ground contact adds a normal and a friction force to the contact law's (either friction law). Set as an
environment's ``contact_augmentation`` it runs in the ground truth's frames; given to a
:class:`~nerd.diffsim.GroundTruthRollout` it is recorded on the tape, so its weights get gradients.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import newton
import torch
import warp as wp
from torch import nn

from nerd.diffsim import GroundTruthRollout
from nerd.envs.contacts import contact_point_velocity, ground_contact_point


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


CONTACT_SPEED_EPS = 1.0e-3  # [m/s] smooths the sliding speed and direction at rest (the gradient of |v| at 0)
CONTACT_HIDDEN = wp.constant(16)
"""Hidden units of :class:`ContactForceAugmentation`: a compile-time loop bound, so that Warp unrolls the loop (its
adjoint does not differentiate variables mutated in a dynamic loop)."""


@wp.kernel
def eval_contact_augmentation(
    body_q: wp.array[wp.transform],
    body_qd: wp.array[wp.spatial_vector],
    body_com: wp.array[wp.vec3],
    shape_body: wp.array[int],
    contact_shape: wp.array[int],
    contact_point0: wp.array[wp.vec3],
    contact_point1: wp.array[wp.vec3],
    contact_normal: wp.array[wp.vec3],
    contact_margin0: wp.array[float],
    contact_margin1: wp.array[float],
    w1: wp.array2d[float],
    b1: wp.array[float],
    w2: wp.array2d[float],
    b2: wp.array[float],
    gap_scale: float,
    speed_scale: float,
    force_scale: float,
    # output
    body_f: wp.array[wp.spatial_vector],
):
    """Add the network's contact force of each penetrating contact to its body's wrench (force, torque about the
    COM, world axes): inputs gap/gap_scale, normal and sliding speed/speed_scale; outputs a push along the ground's
    normal and a force against the sliding direction, times force_scale."""
    tid = wp.tid()
    body = shape_body[contact_shape[tid]]
    X = body_q[body]
    n, p, d = ground_contact_point(X, contact_point0[tid], contact_point1[tid], contact_normal[tid],
                                   contact_margin0[tid], contact_margin1[tid])
    if d >= 0.0:
        return
    r, vn, vt = contact_point_velocity(X, body_com[body], body_qd[body], n, p)
    speed = wp.sqrt(wp.dot(vt, vt) + CONTACT_SPEED_EPS * CONTACT_SPEED_EPS)
    x0 = d / gap_scale
    x1 = vn / speed_scale
    x2 = speed / speed_scale
    normal_out = b2[0]
    friction_out = b2[1]
    for j in range(CONTACT_HIDDEN):
        h = wp.tanh(w1[j, 0] * x0 + w1[j, 1] * x1 + w1[j, 2] * x2 + b1[j])
        normal_out += w2[0, j] * h
        friction_out += w2[1, j] * h
    f = force_scale * (normal_out * n - friction_out * (vt / speed))
    wp.atomic_add(body_f, body, wp.spatial_vector(f, wp.cross(r, f)))


class ContactForceAugmentation(nn.Module):
    """A network inside the contact law: for each penetrating ground contact, inputs (gap / ``gap_scale``, normal
    speed / ``speed_scale``, sliding speed / ``speed_scale``), one tanh layer of :data:`CONTACT_HIDDEN` units,
    outputs a normal push and a friction force (against the sliding direction), times ``force_scale`` [N]. The
    output layer starts at zero, so an untrained augmentation adds nothing. Weights are float32 on the
    environment's device."""

    def __init__(self, gap_scale: float = 1.0e-3, speed_scale: float = 1.0, force_scale: float = 10.0):
        super().__init__()
        hidden = int(CONTACT_HIDDEN)
        bound = 1.0 / math.sqrt(3.0)
        self.w1 = nn.Parameter(torch.empty(hidden, 3).uniform_(-bound, bound))
        self.b1 = nn.Parameter(torch.empty(hidden).uniform_(-bound, bound))
        self.w2 = nn.Parameter(torch.zeros(2, hidden))
        self.b2 = nn.Parameter(torch.zeros(2))
        self.scales = (float(gap_scale), float(speed_scale), float(force_scale))

    def weights(self) -> tuple[torch.Tensor, ...]:
        """The weights in the kernel's order (w1, b1, w2, b2)."""
        return self.w1, self.b1, self.w2, self.b2

    def apply_forces(self, model: newton.Model, state: newton.State, contacts: newton.Contacts | None,
                     weights: Sequence[wp.array] | None = None) -> None:
        """Add the network's contact forces of ``state`` to ``state.body_f``; ``weights`` are Warp arrays of the
        weights (a tape's copies, whose gradients are read back), else this module's own values."""
        if contacts is None or contacts.rigid_contact_max == 0:
            return
        if weights is None:
            weights = [wp.from_torch(w.detach().to(wp.device_to_torch(model.device)).contiguous())
                       for w in self.weights()]
        wp.launch(eval_contact_augmentation, dim=contacts.rigid_contact_max,
                  inputs=[state.body_q, state.body_qd, model.body_com, model.shape_body, contacts.rigid_contact_shape0,
                          contacts.rigid_contact_point0, contacts.rigid_contact_point1, contacts.rigid_contact_normal,
                          contacts.rigid_contact_margin0, contacts.rigid_contact_margin1, *weights, *self.scales],
                  outputs=[state.body_f], device=model.device)


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


__all__ = ["ContactForceAugmentation", "JointTorqueAugmentation", "hybrid_rollout"]
