"""Differentiable rollouts (NeuralSim's first part): the ground truth through Warp's tape, NeRD through torch autograd.

Both functions take a robot environment, initial states ``(N, S)`` and joint torques ``(N, H, J)`` held over each
frame, and return the states after each of the H frames, ``(N, H, S)``, as torch tensors whose gradients flow back
to the initial states and torques (and to chosen physical parameters, or to the network's weights):

* :func:`rollout_ground_truth` / :class:`GroundTruthRollout`: Newton's Featherstone with the environment's settings
  (substeps, mass matrix refreshed once per frame by default, Newton's Coulomb ground contacts), recorded on a
  ``wp.Tape`` and bridged to torch by a ``torch.autograd.Function`` whose backward seeds the tape's adjoints with
  torch's incoming gradient. Every substep writes a fresh ``State``, every frame a fresh ``Control``, contact set
  and mass-matrix buffers, so no array is overwritten while recording (Warp's adjoints replay the forward from
  the arrays' values). The engine is float32: gradients are float32.
* :func:`rollout_neural`: the integrator's prediction path (:func:`~nerd.features.build_inputs`, the model's
  normalised tokens and :meth:`~nerd.models.nerd_model.NeRDModel.predict_last`,
  :func:`~nerd.features.apply_targets`) with a torch-side history, differentiable in the initial states, torques
  and weights. Forward kinematics (the body-frame anchor, the contact candidates) runs through the same Warp tape
  bridge; contacts against each environment's ground plane are evaluated in torch (what
  :mod:`nerd.envs.contacts` detects and :func:`~nerd.envs.contacts.contact_features` reads).

Differentiable physical parameters, :data:`PARAMETERS`: Newton ``Model`` arrays that Featherstone reads. A value is
given per robot copy, with the per-env shape (broadcast to every env) or with a leading N (one value per env).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

import newton
import torch
import warp as wp

from nerd.envs.contacts import ContactAugmentation, detect_plane_contacts
from nerd.envs.environment import Environment
from nerd.envs.solvers import make_solver
from nerd.errors import UserError
from nerd.features import (
    RobotSignature,
    apply_targets,
    build_inputs,
    check_checkpoint_for_env,
    signature_of_env,
    with_model_options,
)
from nerd.frames import transform_point
from nerd.models.nerd_model import NeRDModel

PARAMETERS: dict[str, str] = {
    "body_mass": "body",
    "body_inertia": "body",
    "body_com": "body",
    "joint_X_p": "joint",
    "joint_armature": "dof",
    "joint_damping": "dof",
    "joint_limit_ke": "dof",
    "joint_limit_kd": "dof",
    "shape_material_ke": "shape",
    "shape_material_kd": "shape",
    "shape_material_mu": "shape",
}
"""Differentiable ``newton.Model`` arrays -> what they are indexed by (body, joint, joint DoF, shape).
``joint_X_p`` is each joint's pose in its parent body ``[p (3), quat xyzw (4)]``: its position is a link length
(the pendulum's second joint sits at x = 1.5 m of link 0). ``joint_damping`` is viscous joint friction
(torque -d q̇ on each DoF, every substep; zero on every robot here)."""

DIFFERENTIABLE_SOLVERS = ("featherstone",)
"""Ground-truth solvers whose steps this module records on a tape (XPBD and MuJoCo Warp are not supported)."""


class GroundTruthRollout:
    """Differentiable Featherstone rollouts of ``env``'s robot (N copies, its ground planes, its solver settings).

    Build once and call many times (system identification); :func:`rollout_ground_truth` is the one-call form.

    Raises:
        UserError: If ``env`` steps with a solver other than Featherstone.
    """

    def __init__(self, env: Environment, contact_augmentation: ContactAugmentation | None = None):
        if env.solver_name not in DIFFERENTIABLE_SOLVERS:
            raise UserError(f"gradients need the featherstone solver; {env.name} steps with '{env.solver_name}', "
                            "which is not recorded on a Warp tape")
        self.env = env
        self.contact_augmentation = contact_augmentation
        """A network inside every substep's contact law (:class:`~nerd.hybrid.ContactForceAugmentation`), or None;
        its weights get gradients like the parameters."""
        self.model = env.build_model(requires_grad=True)
        if self.model.joint_coord_count != env.model.joint_coord_count or self.model.body_count != env.model.body_count:
            raise ValueError(f"{env.name}: the rebuilt model differs from the environment's")
        self.solver = make_solver("featherstone", self.model, env.sim_substeps, env.mass_matrix_refresh)
        n = env.num_envs
        self._counts = {"body": self.model.body_count // n, "joint": self.model.joint_count // n,
                        "dof": self.model.joint_dof_count // n, "shape": self.model.shape_count // n}
        self._defaults = {name: wp.to_torch(getattr(self.model, name), requires_grad=False).clone()
                          for name in PARAMETERS}

    # ------------------------------------------------------------------------------------------------
    def parameter(self, name: str) -> torch.Tensor:
        """The robot's own value of parameter ``name`` for one copy, (per-env count, *element shape)."""
        self._check_name(name)
        value = self._defaults[name]
        return value.view(self.env.num_envs, -1, *value.shape[1:])[0].clone()

    def _check_name(self, name: str) -> None:
        if name not in PARAMETERS:
            raise UserError(f"{self.env.name} has no differentiable parameter '{name}'; valid: {', '.join(PARAMETERS)}")

    def _per_env(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """``value`` as the model array's full (N * count, *element) layout."""
        n, default = self.env.num_envs, self._defaults[name]
        one = (self._counts[PARAMETERS[name]], *default.shape[1:])
        value = torch.as_tensor(value, dtype=torch.float32, device=default.device)
        if tuple(value.shape) == one:
            value = value.expand(n, *one)
        if tuple(value.shape) != (n, *one):
            raise UserError(f"parameter '{name}' must have shape {one} or {(n, *one)}, got {tuple(value.shape)}")
        return value.reshape(default.shape)

    def __call__(self, initial_states: torch.Tensor, torques: torch.Tensor,
                 params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """States after each frame, (N, H, S), differentiable w.r.t. ``initial_states`` (N, S), ``torques``
        (N, H, J) and the tensors in ``params`` (name -> value, see :data:`PARAMETERS`)."""
        env = self.env
        params = dict(params or {})
        for name in params:
            self._check_name(name)
        if initial_states.shape != (env.num_envs, env.state_dim):
            raise UserError(f"{env.name}: initial states must have shape ({env.num_envs}, {env.state_dim}), "
                            f"got {tuple(initial_states.shape)}")
        if torques.dim() != 3 or torques.shape[0] != env.num_envs or torques.shape[2] != env.act_dim:
            raise UserError(f"{env.name}: torques must have shape ({env.num_envs}, H, {env.act_dim}), "
                            f"got {tuple(torques.shape)}")
        names = list(params)
        weights = tuple(self.contact_augmentation.weights()) if self.contact_augmentation is not None else ()
        return _TapedRollout.apply(self, names, initial_states, torques, *(params[k] for k in names), *weights)

    # ------------------------------------------------------------------------------------------------
    def _record(self, initial_states: torch.Tensor, torques: torch.Tensor, values: dict[str, torch.Tensor],
                weights: Sequence[wp.array] = ()):
        """Run the rollout on a new tape; returns (tape, states after each frame, the arrays to read grads of)."""
        env, model, n = self.env, self.model, self.env.num_envs
        for name, default in self._defaults.items():
            wp.to_torch(getattr(model, name)).copy_(values[name].detach() if name in values else default)
        frames, substeps = torques.shape[1], env.sim_substeps
        states = [model.state(requires_grad=True) for _ in range(frames * substeps + 1)]
        controls = [model.control(requires_grad=True) for _ in range(frames)]
        start = initial_states.detach().to(env.torch_device, torch.float32)
        wp.to_torch(states[0].joint_q).view(n, -1).copy_(start[:, : env.dof_q])
        wp.to_torch(states[0].joint_qd).view(n, -1).copy_(start[:, env.dof_q :])
        for k, control in enumerate(controls):
            f = wp.to_torch(control.joint_f).view(n, -1)
            f.zero_()
            f[:, env.act_dof_indices] = torques[:, k].detach().to(env.torch_device, torch.float32)
        self.solver._step = 0
        tape = wp.Tape()
        with tape:
            # Spatial inertias and COM frames from body_mass/inertia/com: baked once by the solver, recorded here so
            # gradients reach those parameters.
            self.solver._update_body_inertial_buffers()
            newton.eval_fk(model, states[0].joint_q, states[0].joint_qd, states[0])
            for k in range(frames):
                contacts = self._detect(states[k * substeps])
                for i in range(substeps):
                    if i == 0 or env.mass_matrix_refresh == "substep":
                        # A substep that refreshes the mass matrix gets its own buffers (CubeToss refreshes at
                        # every substep).
                        self._fresh_mass_matrix()
                    env.substep(model, self.solver, states[k * substeps + i], states[k * substeps + i + 1],
                                controls[k], contacts, self.contact_augmentation, weights)
        outputs = [states[(k + 1) * substeps] for k in range(frames)]
        return tape, states[0], controls, outputs, states[1:]

    def _fresh_mass_matrix(self) -> None:
        """New mass-matrix buffers for the next frame: the solver keeps them across steps, and a refresh would
        overwrite the previous frame's, which its adjoint replays."""
        s = self.solver
        s.M, s.J, s.H = wp.zeros_like(s.M), wp.zeros_like(s.J), wp.zeros_like(s.H)
        s.P, s.L = wp.zeros_like(s.P), wp.zeros_like(s.L)

    def _armature_grad(self, solved: list[newton.State]) -> torch.Tensor:
        """Gradient of joint_armature. Newton's Cholesky adjoint is a no-op (the solve's adjoint goes to the mass
        matrix), so the armature, added to the mass matrix's diagonal inside the factorisation, gets none from the
        tape. It is recovered from each substep's solve x = (H + diag(a))^-1 b: the adjoint of diag(a)_j is
        -t_j x_j, t = (H + diag(a))^-T x̄, which the solve's adjoint leaves in the state's ``joint_solve_tmp``."""
        grad = torch.zeros(self.model.joint_dof_count, dtype=torch.float32, device=self.env.torch_device)
        for state in solved:
            tmp = wp.to_torch(state.joint_solve_tmp, requires_grad=False)
            grad -= tmp * wp.to_torch(state.joint_qdd, requires_grad=False)
        return grad

    def _detect(self, state: newton.State) -> newton.Contacts | None:
        """A new contact set of ``state`` against each env's ground plane (the environment's collision stage)."""
        ground = self.env.ground
        if ground.contacts is None:
            return None
        base = ground.contacts
        contacts = newton.Contacts(base.rigid_contact_max, 0, requires_grad=True, device=self.model.device)
        for name in ("rigid_contact_count", "rigid_contact_shape0", "rigid_contact_shape1", "rigid_contact_point0",
                     "rigid_contact_margin0", "rigid_contact_margin1"):
            getattr(contacts, name).assign(getattr(base, name))
        wp.launch(detect_plane_contacts, dim=base.rigid_contact_max,
                  inputs=[state.body_q, ground._candidate_body, ground._candidate_point, ground.count,
                          ground._plane_point, ground._plane_normal],
                  outputs=[contacts.rigid_contact_normal, contacts.rigid_contact_point1], device=self.model.device)
        return contacts


class _TapedRollout(torch.autograd.Function):
    """Forward: record a Featherstone rollout on a Warp tape. Backward: seed the frames' adjoints, run the tape."""

    @staticmethod
    def forward(ctx, sim: GroundTruthRollout, names: list[str], initial_states: torch.Tensor, torques: torch.Tensor,
                *values: torch.Tensor) -> torch.Tensor:
        n = sim.env.num_envs
        values, weight_values = values[: len(names)], values[len(names):]
        full = {name: sim._per_env(name, v) for name, v in zip(names, values, strict=True)}
        # The augmentation's weights as Warp arrays of the tape: their adjoints are the weights' gradients.
        ctx.weights = [wp.from_torch(w.detach().to(sim.env.torch_device, torch.float32).contiguous().clone(),
                                     requires_grad=True) for w in weight_values]
        tape, first, controls, outputs, ctx.solved = sim._record(initial_states, torques, full, ctx.weights)
        states = torch.stack([torch.cat([wp.to_torch(s.joint_q, requires_grad=False).view(n, -1),
                                        wp.to_torch(s.joint_qd, requires_grad=False).view(n, -1)],
                                        dim=1) for s in outputs], dim=1).clone()
        ctx.sim, ctx.names, ctx.tape, ctx.first, ctx.controls, ctx.outputs = sim, names, tape, first, controls, outputs
        ctx.value_shapes = [v.shape for v in values]
        ctx.weight_dtypes = [w.dtype for w in weight_values]
        ctx.dtypes = (initial_states.dtype, torques.dtype)
        return states.to(initial_states.dtype)

    @staticmethod
    def backward(ctx, grad_states: torch.Tensor):
        sim, env, n = ctx.sim, ctx.sim.env, ctx.sim.env.num_envs
        model, tape = sim.model, ctx.tape
        tape.zero()
        for name in ctx.names:
            getattr(model, name).grad.zero_()
        for weight in ctx.weights:
            weight.grad.zero_()
        grad_states = grad_states.to(torch.float32).contiguous()
        for k, state in enumerate(ctx.outputs):
            wp.to_torch(state.joint_q.grad).view(n, -1).add_(grad_states[:, k, : env.dof_q])
            wp.to_torch(state.joint_qd.grad).view(n, -1).add_(grad_states[:, k, env.dof_q :])
        tape.backward()
        grad_initial = torch.cat([wp.to_torch(ctx.first.joint_q.grad).view(n, -1),
                                  wp.to_torch(ctx.first.joint_qd.grad).view(n, -1)], dim=1).clone()
        grad_torques = torch.stack([wp.to_torch(c.joint_f.grad).view(n, -1)[:, env.act_dof_indices]
                                    for c in ctx.controls], dim=1).clone()
        grad_values = []
        for name, shape in zip(ctx.names, ctx.value_shapes, strict=True):
            g = wp.to_torch(getattr(model, name).grad).clone()
            if name == "joint_armature":
                g = g + sim._armature_grad(ctx.solved)
            g = g.view(n, -1, *g.shape[1:])
            grad_values.append(g.sum(0) if len(shape) == g.dim() - 1 else g)
        grad_weights = [wp.to_torch(w.grad).clone().to(dtype) for w, dtype in zip(ctx.weights, ctx.weight_dtypes,
                                                                                   strict=True)]
        tape.reset()
        return (None, None, grad_initial.to(ctx.dtypes[0]), grad_torques.to(ctx.dtypes[1]), *grad_values,
                *grad_weights)


def rollout_ground_truth(env: Environment, initial_states: torch.Tensor, torques: torch.Tensor,
                         params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """States (N, H, S) after each of the H frames of Featherstone from ``initial_states`` (N, S) under
    ``torques`` (N, H, J); differentiable w.r.t. both and the ``params`` (see :class:`GroundTruthRollout`)."""
    return GroundTruthRollout(env)(initial_states, torques, params)


# ----------------------------------------------------------------------------------------------------
# NeRD


class _ForwardKinematics(torch.autograd.Function):
    """Body poses (N, B, 7) of world states (N, S) by Newton's forward kinematics, on a Warp tape."""

    @staticmethod
    def forward(ctx, model: newton.Model, env: Environment, states: torch.Tensor) -> torch.Tensor:
        n = env.num_envs
        state = model.state(requires_grad=True)
        s = states.detach().to(torch.float32)
        wp.to_torch(state.joint_q).view(n, -1).copy_(s[:, : env.dof_q])
        wp.to_torch(state.joint_qd).view(n, -1).copy_(s[:, env.dof_q :])
        tape = wp.Tape()
        with tape:
            newton.eval_fk(model, state.joint_q, state.joint_qd, state)
        ctx.tape, ctx.state, ctx.env, ctx.dtype = tape, state, env, states.dtype
        return wp.to_torch(state.body_q, requires_grad=False).view(n, -1, 7).clone().to(states.dtype)

    @staticmethod
    def backward(ctx, grad_body_q: torch.Tensor):
        n, state = ctx.env.num_envs, ctx.state
        ctx.tape.backward(grads={state.body_q: wp.from_torch(grad_body_q.to(torch.float32).reshape(-1, 7).contiguous(),
                                                             dtype=wp.transform)})
        grad = torch.cat([wp.to_torch(state.joint_q.grad).view(n, -1), wp.to_torch(state.joint_qd.grad).view(n, -1)],
                         dim=1).clone()
        ctx.tape.reset()
        return None, None, grad.to(ctx.dtype)


_FK_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fk_model(env: Environment) -> newton.Model:
    """The ``requires_grad`` twin of ``env``'s model for forward kinematics, built once per environment."""
    if env not in _FK_MODELS:
        _FK_MODELS[env] = env.build_model(requires_grad=True)
    return _FK_MODELS[env]


def _plane_contacts(env: Environment, body_q: torch.Tensor) -> dict[str, torch.Tensor]:
    """NeRD's contact features (as :func:`~nerd.envs.contacts.contact_features`) of body poses (N, B, 7) against
    each env's ground plane, in torch: what the environment's collision stage detects, differentiable."""
    ground, n = env.ground, env.num_envs
    cand = ground.candidates
    device, dtype = body_q.device, body_q.dtype
    bodies = torch.as_tensor(cand.body, dtype=torch.long, device=device)
    points = torch.as_tensor(cand.point, dtype=dtype, device=device)
    x = transform_point(body_q[:, bodies], points.expand(n, -1, -1))
    normals, plane_points = (t.to(device, dtype) for t in env.get_ground_planes())
    depth = ((x - plane_points[:, None]) * normals[:, None]).sum(-1)
    thickness = torch.as_tensor(cand.thickness, dtype=dtype, device=device).expand(n, -1)
    return {"contact_normals": normals[:, None].expand_as(x), "contact_points_0": x,
            "contact_points_1": x - depth[..., None] * normals[:, None], "contact_depths": depth,
            "contact_thicknesses": thickness}


def rollout_neural(model_or_checkpoint: NeRDModel | str | Path, env: Environment, initial_states: torch.Tensor,
                   torques: torch.Tensor, history_length: int | None = None,
                   signature: RobotSignature | None = None) -> torch.Tensor:
    """States (N, H, S) after each of the H frames of NeRD from ``initial_states`` (N, S) under ``torques``
    (N, H, J); differentiable w.r.t. both and the model's weights.

    The integrator's prediction path (tokens normalised with the model's statistics, a left-aligned history of at
    most ``history_length`` tokens, the prediction at the last one, applied as the integrator applies it), with the
    history kept here as a list of tokens. ``history_length``: a checkpoint's own by default, else 10. A checkpoint
    brings its signature (its inputs, e.g. the joint-limit option); a model object is read as ``signature`` or, by
    default, as the environment's with the model config's options.
    The rollout runs in ``initial_states``' dtype (float64 with a float64 model: ``nerd_model.double()``); forward
    kinematics, needed by body-frame and contact robots, runs in Warp's float32.
    """
    if isinstance(model_or_checkpoint, NeRDModel):
        nerd_model, length = model_or_checkpoint, history_length or 10
        sig = signature or with_model_options(signature_of_env(env), nerd_model.cfg)
    else:
        from nerd.checkpoint import load_checkpoint

        nerd_model, sig, payload = load_checkpoint(model_or_checkpoint, device=env.torch_device)
        check_checkpoint_for_env(sig, env)
        length = history_length or payload["history_length"]
    length = min(length, nerd_model.max_history)
    if nerd_model.input_groups != sig.input_groups or nerd_model.output_dim != sig.target_dim:
        raise UserError(f"the NeRD model's inputs/outputs do not match the {env.name} signature")
    needs_fk = sig.layout.states_frame == "body" and not sig.floating_base or sig.contact_count
    fk_model = _fk_model(env) if needs_fk else None
    dtype = initial_states.dtype if initial_states.is_floating_point() else torch.float32
    mean, std = (t.to(env.torch_device, dtype) for t in nerd_model.token_statistics())
    names = list(sig.input_groups)
    states, history, out = initial_states.to(env.torch_device, dtype), [], []
    for k in range(torques.shape[1]):
        body_q = _ForwardKinematics.apply(fk_model, env, states) if needs_fk else None
        root = (body_q[:, env.anchor_body] if body_q is not None
                else torch.zeros(env.num_envs, 7, dtype=dtype, device=states.device))
        contacts = _plane_contacts(env, body_q) if sig.contact_count else None
        groups, anchor = build_inputs(sig, states, root, torques[:, k].to(states), contacts)
        token = (torch.cat([groups[name] for name in names], dim=1) - mean) / std
        history = (history + [token])[-length:]
        tokens = torch.stack(history, dim=1)
        last = torch.full((env.num_envs,), len(history) - 1, dtype=torch.long, device=states.device)
        targets = nerd_model.predict_last(tokens, last)
        states = apply_targets(sig, states, targets, anchor)
        out.append(states)
    return torch.stack(out, dim=1)


__all__ = ["DIFFERENTIABLE_SOLVERS", "PARAMETERS", "GroundTruthRollout", "rollout_ground_truth", "rollout_neural"]
