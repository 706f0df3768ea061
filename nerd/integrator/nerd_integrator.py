"""NeRDIntegrator: a Newton solver whose contact solving, dynamics and integration are a learned model.

It has the step signature of Newton's solvers, ``step(state_in, state_out, control, contacts, dt)``, and reads
everything from those arguments: joint coordinates and body poses from ``state_in``, joint torques from
``control.joint_f``, and the contacts from the same :class:`newton.Contacts` set the analytical solver
consumes (candidate points in body coordinates, ground points and normals in the world). One call advances
one frame: it appends the current robot-centric token to each env's history, predicts the state change,
integrates it, writes ``joint_q``/``joint_qd`` of ``state_out`` and runs forward kinematics.

History: one buffer (N, H, D) of normalised tokens (each token normalised once, when it is recorded),
left-aligned. An env with L < H valid tokens holds them at positions 0..L-1 and its prediction is read at
position L-1; the causal backbone never looks at later positions, so envs with different history lengths share
one forward pass, and only that position's output is computed (:meth:`NeRDModel.predict_last`).

Per step the integrator synchronises with the device at most once: the check for non-finite torques and
predictions (:meth:`~NeRDIntegrator.set_nan_check`), which a caller that handles divergence itself turns off, and
which a caller that replays the step as a CUDA graph defers (a device flag the step writes,
:meth:`~NeRDIntegrator.raise_if_diverged` reads). Every buffer the step writes outlives it (its address is fixed),
so the step can be recorded once and replayed (:class:`~nerd.envs.interop.FrameGraph`).
On a GPU, torch and Warp are ordered by stream waits (device side), not by host synchronisation.
:meth:`NeRDIntegrator.clear_history` clears only the reset envs' histories (the release cleared every env's
history whenever any env reset).

Public surface besides the solver contract: :meth:`~NeRDIntegrator.observe` (record a token without predicting,
for frames the ground truth steps), :meth:`~NeRDIntegrator.clear_history`, :meth:`~NeRDIntegrator.set_nan_check`
and :meth:`~NeRDIntegrator.raise_if_diverged`. Newton's ``SolverBase.reset(state, world_mask, flags)`` is not
overridden: the integrator keeps no per-state solver data to reset.
"""

from __future__ import annotations

from collections.abc import Sequence

import newton
import torch
import warp as wp

from nerd.envs.contacts import contact_features
from nerd.envs.interop import torch_waits_for_warp, warp_waits_for_torch
from nerd.errors import RolloutDivergedError, UserError
from nerd.features import MODEL_OPTIONS, RobotSignature, apply_targets, build_inputs, mirror_sign_tensors
from nerd.models.nerd_model import NeRDModel

CPU_CHUNK_ENVS = 256
"""Envs per network call on a CPU: (256, 10, 256) float32 MLP activations (2.6 MB) stay in L2/L3 cache; measured
fastest of 64-2048 for the Cartpole model at N = 2048 (docs/notebook/results.md)."""

VIEW_CACHE_SIZE = 64
"""Simulator arrays whose torch views an integrator keeps (a frame reads ten or so)."""


class NeRDIntegrator(newton.solvers.SolverBase):
    """Learned one-frame integrator for N copies of one robot.

    Args:
        model: The Newton model of the N robot copies.
        nerd_model: The trained network (with its normalisation statistics).
        signature: The robot the network was trained for.
        num_envs: Number of robot copies N in ``model``.
        anchor_body: Body index (within one env) of the robot-centric anchor.
        act_dof_indices: DoF indices (within one env's joint_qd) whose ``joint_f`` are the torques fed to the model.
        frame_dt: The frame duration the network was trained for [s]; ``step`` refuses another ``dt``.
        history_length: Tokens of history H the network was trained with (10 in the paper). It may not exceed
            the backbone's context (``max_history``, the transformer's ``block_size``); a backbone that reads
            one token only (the MLP baseline, ``max_history`` 1) keeps a history of one.
        check_nan: Raise :class:`RolloutDivergedError` when a prediction is not finite, and a
            :class:`~nerd.errors.UserError` when the applied torques are not (see :meth:`set_nan_check`).
        compile_model: Run the per-step prediction through ``torch.compile`` (an option of ours: see
            docs/notebook/results.md for what it does on a CPU; the first steps pay the compilation).
        chunk_envs: Envs per network call. None: :data:`CPU_CHUNK_ENVS` on a CPU (activations that stay in
            cache; 1.3x faster than one call for 2048 envs on the project's CPU), all envs at once on a GPU.
        mirror_signs: Our option: feed the network the mirror image of every state and torque, and mirror its
            prediction back. The robot's reflection symmetry, one sign per joint DoF
            (:attr:`~nerd.envs.environment.Environment.mirror_joint_signs`). Alone it is the same dynamics seen in a
            mirror; next to the plain model in an ensemble it averages out the part of the network's error that
            breaks the symmetry (docs/notebook/accuracy.md). None: the network sees the robot as it is.

    Raises:
        ValueError: If the network's input groups do not match ``signature`` or ``history_length`` exceeds its
            context.
    """

    def __init__(self, model: newton.Model, nerd_model: NeRDModel, signature: RobotSignature, *, num_envs: int,
                 anchor_body: int, act_dof_indices: Sequence[int], frame_dt: float, history_length: int = 10,
                 check_nan: bool = True, compile_model: bool = False, chunk_envs: int | None = None,
                 mirror_signs: Sequence[float] | None = None):
        super().__init__(model)
        if nerd_model.input_groups != signature.input_groups or nerd_model.output_dim != signature.target_dim:
            raise ValueError(f"the NeRD model's inputs/outputs do not match the {signature.env_name} signature")
        stated = {key: getattr(nerd_model.cfg, key) for key in MODEL_OPTIONS}
        if signature.model_options != stated:
            # Same widths, other meaning (e.g. an absolute prediction applied as a state change): refuse.
            raise UserError(f"the NeRD model was trained with model options {stated}, but the integrator was given "
                            f"{signature.model_options}")
        if history_length < 1 or history_length > nerd_model.max_history > 1:
            raise UserError(f"history_length must lie in [1, {nerd_model.max_history}] (the model's context), "
                             f"got {history_length}")
        # Checked once here, so the per-step path runs without validation or host synchronisation.
        self.nerd_model = nerd_model
        self.signature = signature
        self.num_envs = num_envs
        self.frame_dt = frame_dt
        self.check_nan = check_nan
        self.bodies_per_env = model.body_count // num_envs
        self.anchor_body = anchor_body
        self.act_dof_indices = list(act_dof_indices)
        # Gathered every step: a slice when contiguous (a view), else an index tensor made once on the device.
        first = self.act_dof_indices[0] if self.act_dof_indices else 0
        contiguous = self.act_dof_indices == list(range(first, first + len(self.act_dof_indices)))
        self._act_columns = (slice(first, first + len(self.act_dof_indices)) if contiguous else torch.tensor(
            self.act_dof_indices, dtype=torch.long, device=wp.device_to_torch(model.device)))
        self.history_length = min(history_length, nerd_model.max_history)
        """Tokens kept per env: H, or 1 for a one-token backbone."""
        self.torch_device = wp.device_to_torch(model.device)
        self._group_names = list(signature.input_groups)
        # The statistics are fixed once trained: normalising each token once, when recorded, replaces normalising
        # the whole history every step.
        self._token_mean, self._token_std = (t.to(self.torch_device) for t in nerd_model.token_statistics())
        self._tokens = torch.zeros(num_envs, self.history_length, nerd_model.input_dim, device=self.torch_device)
        self.history_count = torch.zeros(num_envs, dtype=torch.long, device=self.torch_device)
        """(N,) valid history tokens per env."""
        self._env_rows = torch.arange(num_envs, device=self.torch_device)
        self._contact_bodies: tuple[newton.Contacts, torch.Tensor] | None = None
        self._views: dict[int, tuple[wp.array, torch.Tensor]] = {}  # see torch_view
        if chunk_envs is None:
            chunk_envs = num_envs if model.device.is_cuda else CPU_CHUNK_ENVS
        self.chunk_envs = max(1, chunk_envs)
        """Envs per network call."""
        self._predict = torch.compile(nerd_model.predict_last, dynamic=False) if compile_model else \
            nerd_model.predict_last
        self.data_range = None if nerd_model.data_range is None else tuple(
            bound.to(self.torch_device) for bound in nerd_model.data_range)
        """The model's training-data range (low, high) per token column, or None (see :meth:`outside_data`)."""
        # (N, input_dim) raw inputs of the last recorded token, written in place (a replayed step writes it too).
        self._last_token = torch.zeros(num_envs, nerd_model.input_dim, device=self.torch_device)
        self._token_recorded = False
        self.nan_flags: torch.Tensor | None = None
        """(2, N) with the deferred NaN check: whether each env's torques (row 0) and predicted states (row 1) stayed
        finite since its history was last cleared; None when the check synchronises every step (or is off)."""
        self.mirror = None if mirror_signs is None else mirror_sign_tensors(
            signature, tuple(mirror_signs), self.act_dof_indices, self.torch_device)
        """(state signs (S,), torque signs (J,)) of the mirror option, or None."""

    def set_nan_check(self, enabled: bool, deferred: bool = False) -> None:
        """Raise :class:`RolloutDivergedError` on a non-finite prediction (on), or leave it to the caller (off).

        The check covers the torques the step reads too (one synchronisation with the device per step for both:
        the environment then skips its own torque check); a caller that handles divergence per env (the RL vec
        env) turns it off and the environment checks the torques.

        ``deferred``: the step does not synchronise; it only clears the envs' flags in :attr:`nan_flags` (device
        side) and :meth:`raise_if_diverged` raises what the step would have raised, when called. For a step that
        is replayed as a CUDA graph. The step then writes a non-finite prediction to the state instead of
        stopping before it.
        """
        self.check_nan = enabled
        self.nan_flags = (torch.ones(2, self.num_envs, dtype=torch.bool, device=self.torch_device)
                          if enabled and deferred else None)

    def raise_if_diverged(self) -> None:
        """With the deferred NaN check: raise what the step's own check would have raised, if any env's torques or
        prediction were not finite at a step since its history was last cleared or since the last raise (one host
        synchronisation). Nothing to do otherwise."""
        if self.nan_flags is None:
            return
        bad_torques, bad_states = (~self.nan_flags).any(dim=1).tolist()
        if bad_torques or bad_states:
            bad_envs = (~self.nan_flags[1]).nonzero().flatten().tolist()
            self.nan_flags.fill_(True)  # raised once: a caller that goes on is told of new divergences only
            self._raise_not_finite(bad_torques, bad_envs)

    def _raise_not_finite(self, bad_torques: bool, bad_envs: list[int]) -> None:
        """The NaN check's errors: non-finite torques are the caller's (a UserError), a non-finite prediction the
        model's (:class:`RolloutDivergedError`, naming the first envs)."""
        if bad_torques:
            raise UserError(f"{self.signature.env_name}: joint torques (or the actions they come from) contain NaN "
                            "or inf")
        raise RolloutDivergedError(f"NeRD rollout produced non-finite states in envs {bad_envs[:8]}")

    def clear_history(self, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Forget the history of ``env_ids`` (all envs if None).

        The tokens are zeroed too, not only the counts: attention still computes the masked positions, and a
        stale non-finite token from the old episode would otherwise turn the new episode's output into NaN.
        """
        rows = slice(None) if env_ids is None else torch.as_tensor(env_ids, device=self.torch_device, dtype=torch.long)
        self.history_count[rows] = 0
        self._tokens[rows] = 0.0
        if self.nan_flags is not None:
            self.nan_flags[:, rows] = True

    # ----------------------------------------------------------------------------------------------
    def current_inputs(self, state: newton.State, control: newton.Control, contacts: newton.Contacts | None
                       ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None, torch.Tensor]:
        """Token groups (N, width), anchor (N, 7) or None, and world states (N, S) of ``state``."""
        raw = self.read_simulator(state, control, contacts)
        groups, anchor = self.build_inputs(*raw)
        return groups, anchor, raw[0]

    def build_inputs(self, states: torch.Tensor, root_body_q: torch.Tensor, joint_acts: torch.Tensor,
                     contacts: dict[str, torch.Tensor] | None) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """This member's token groups and anchor (:func:`~nerd.features.build_inputs`) of what
        :meth:`read_simulator` read; with the mirror option, of its mirror image."""
        if self.mirror is not None:
            states, joint_acts = states * self.mirror[0], joint_acts * self.mirror[1]
        return build_inputs(self.signature, states, root_body_q, joint_acts, contacts)

    def read_simulator(self, state: newton.State, control: newton.Control, contacts: newton.Contacts | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor] | None]:
        """What :func:`~nerd.features.build_inputs` reads, from the simulator: world states (N, S), the anchor
        body's pose (N, 7), the fed torques (N, J) and the contact features (None for a robot without contacts)."""
        n, sig = self.num_envs, self.signature
        torch_waits_for_warp(self.model.device)  # reads arrays the last Warp launches wrote
        view = self.torch_view
        states = torch.cat([view(state.joint_q).view(n, -1), view(state.joint_qd).view(n, -1)], dim=1)
        body_q = view(state.body_q).view(n, self.bodies_per_env, 7)
        torques = view(control.joint_f).view(n, -1)[:, self._act_columns]
        features = None
        if sig.contact_count:
            if contacts is None:
                raise ValueError(
                    f"{sig.env_name} has {sig.contact_count} contact candidates; step() needs its contacts")
            features = contact_features(view(state.body_q), self._candidate_bodies(contacts), contacts, n, view)
        return states, body_q[:, self.anchor_body], torques, features

    def torch_view(self, array: wp.array) -> torch.Tensor:
        """The torch view of a simulator array, made once per array: a view is free to reuse, and making one on a
        GPU asks the driver about the pointer, which a recording CUDA graph may refuse. The cache holds the arrays
        (so an id is never reused while cached) and is emptied when it grows past :data:`VIEW_CACHE_SIZE`."""
        cached = self._views.get(id(array))
        if cached is None:
            if len(self._views) >= VIEW_CACHE_SIZE:
                self._views.clear()
            cached = self._views[id(array)] = (array, wp.to_torch(array))
        return cached[1]

    def _candidate_bodies(self, contacts: newton.Contacts) -> torch.Tensor:
        """(N * C,) body of each contact, gathered once per contact set (its candidates' bodies are fixed)."""
        if self._contact_bodies is None or self._contact_bodies[0] is not contacts:
            shape_body = wp.to_torch(self.model.shape_body)
            self._contact_bodies = (contacts, shape_body[wp.to_torch(contacts.rigid_contact_shape0).long()])
        return self._contact_bodies[1]

    def observe(self, state: newton.State, control: newton.Control, contacts: newton.Contacts | None) -> None:
        """Record the token of ``state`` without predicting: for frames that another solver steps.

        Keeps the history current while the ground truth runs, so a switch to the integrator mid-rollout starts
        from a full history.
        """
        groups, _, _ = self.current_inputs(state, control, contacts)
        self.push_history(groups)

    @torch.inference_mode()
    def push_history(self, groups: dict[str, torch.Tensor]) -> None:
        """Append one token (N, width per group, raw) to every env's history, dropping the oldest when full."""
        self._last_token.copy_(torch.cat([groups[name] for name in self._group_names], dim=1))
        self._token_recorded = True
        token = (self._last_token - self._token_mean) / self._token_std
        # Branch-free (no host synchronisation): full envs shift left by one, then every env writes its slot.
        if self.history_length > 1:
            full = (self.history_count == self.history_length)[:, None, None]
            self._tokens[:, :-1] = torch.where(full, self._tokens[:, 1:], self._tokens[:, :-1])
        position = self.history_count.clamp(max=self.history_length - 1)
        self._tokens[self._env_rows, position] = token
        self.history_count.add_(1).clamp_(max=self.history_length)

    @property
    def keeps_data_range(self) -> bool:
        """Whether the model keeps its training data's range (:meth:`outside_data` can answer)."""
        return self.data_range is not None

    @torch.inference_mode()
    def outside_data(self, margin: float = 0.1) -> torch.Tensor | None:
        """(N,) whether the last recorded token (the state, torques and contacts the last step read) lies outside
        the model's training data: a column below ``low − margin·(high − low)`` or above ``high + margin·(high −
        low)``. None for a model without a recorded range. Computed when called: a step pays nothing for it."""
        if self.data_range is None or not self._token_recorded:
            return None
        low, high = self.data_range
        slack = margin * (high - low)
        token = self._last_token
        return ((token < low - slack) | (token > high + slack)).any(dim=1)

    @torch.inference_mode()
    def predict_targets(self) -> torch.Tensor:
        """De-normalised relative targets (N, P) from the current histories (each needs one token at least)."""
        targets = self._predict(self._tokens, self.history_count - 1, self.chunk_envs)
        # Fixed-base world-frame targets are [Δq, Δq̇]: they mirror with the states' factors.
        return targets if self.mirror is None else targets * self.mirror[0]

    # ----------------------------------------------------------------------------------------------
    def step(self, state_in: newton.State, state_out: newton.State, control: newton.Control,
             contacts: newton.Contacts | None, dt: float, *, observables=None) -> None:
        """Advance one frame of ``dt`` (must equal the training frame duration)."""
        self.check_frame_dt(dt)
        groups, anchor, states = self.current_inputs(state_in, control, contacts)
        self.push_history(groups)
        self.write_prediction(state_out, states, anchor, groups, self.predict_targets())

    def check_frame_dt(self, dt: float) -> None:
        """Refuse a ``dt`` other than the training frame's: the network predicts whole frames."""
        if abs(dt - self.frame_dt) > 1e-9:
            raise ValueError(f"NeRD predicts whole frames of {self.frame_dt:.6g} s; step() got dt = {dt:.6g} s")

    def write_prediction(self, state_out: newton.State, states: torch.Tensor, anchor: torch.Tensor | None,
                         groups: dict[str, torch.Tensor], targets: torch.Tensor) -> None:
        """Apply ``targets`` (N, P; relative or absolute, as the signature says) to ``states`` (N, S) and write the
        next states to ``state_out``.

        ``groups`` are the step's token groups (their torques are checked with the prediction). On a non-finite
        prediction or torque (with the NaN check on) nothing is written.
        """
        with torch.inference_mode():
            next_states = apply_targets(self.signature, states, targets, anchor)
        # One host synchronisation for both checks: the torques the step read and the states it predicted.
        # A robot without actuators (CubeToss) has no joint_acts group: an empty tensor is always finite.
        acts = groups.get("joint_acts", next_states[:, :0])
        if self.check_nan and self.nan_flags is not None:
            with torch.inference_mode():  # the deferred check: device-side flags, no synchronisation
                self.nan_flags[0] &= torch.isfinite(acts).all(dim=1)
                self.nan_flags[1] &= torch.isfinite(next_states).all(dim=1)
        elif self.check_nan and not bool(torch.isfinite(next_states).all() & torch.isfinite(acts).all()):
            bad = torch.nonzero(~torch.isfinite(next_states).all(dim=1)).flatten().tolist()
            self._raise_not_finite(not bool(torch.isfinite(acts).all()), bad)
        n, dof_q = self.num_envs, self.signature.dof_q
        self.torch_view(state_out.joint_q).view(n, -1).copy_(next_states[:, :dof_q])
        self.torch_view(state_out.joint_qd).view(n, -1).copy_(next_states[:, dof_q:])
        warp_waits_for_torch(self.model.device)
        newton.eval_fk(self.model, state_out.joint_q, state_out.joint_qd, state_out)
