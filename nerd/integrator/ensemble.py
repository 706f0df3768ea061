"""NeRDEnsembleIntegrator: K NeRD models of one robot stepping as one solver (an option of ours, not the release's).

Each step applies the mean of the members' relative targets, integrated once. Averaging independently
trained models cancels part of their errors, which compound over a long rollout; it costs K network calls per
step. Measured for the Cartpole in docs/notebook/accuracy.md ("An ensemble of two lineages").

Every member keeps the history of its own inputs, so members may read different input groups (a model with the
joint-limit look-ahead next to one without it) and different history lengths; what they must share is the robot,
its state layout and the target they predict.
"""

from __future__ import annotations

from collections.abc import Sequence

import newton
import torch

from nerd.errors import UserError
from nerd.features import RobotSignature
from nerd.integrator.nerd_integrator import NeRDIntegrator


class NeRDEnsembleIntegrator(newton.solvers.SolverBase):
    """The mean prediction of several :class:`NeRDIntegrator` over the same Newton model, as one solver.

    It has the integrator's public surface (``step``, ``observe``, ``clear_history``, ``set_nan_check``,
    ``predict_targets``, ``history_count``, ``signature``), so :class:`~nerd.neural_environment.NeuralEnvironment`
    and the RL glue use it unchanged; :attr:`disagreement` is its own.

    Args:
        members: Two or more integrators of one robot copy set (the same ``newton.Model``, env count and frame).

    Raises:
        UserError: If fewer than two members are given or they differ in robot, state layout, target or frame.
    """

    def __init__(self, members: Sequence[NeRDIntegrator]):
        members = list(members)
        if len(members) < 2:
            raise UserError(f"an ensemble needs two models or more, got {len(members)}")
        lead = members[0]
        for other in members[1:]:
            if other.model is not lead.model or other.num_envs != lead.num_envs:
                raise UserError("the ensemble's members must step the same environment")
            a, b = lead.signature, other.signature
            if (a.env_name, a.layout, a.prediction, lead.frame_dt) != (b.env_name, b.layout, b.prediction,
                                                                        other.frame_dt):
                raise UserError(f"the ensemble's models predict different things: {a.env_name} {a.layout} every "
                                f"{lead.frame_dt:g} s vs {b.env_name} {b.layout} every {other.frame_dt:g} s")
        super().__init__(lead.model)
        self.members = members
        """The member integrators; the first one's signature and history count stand for the ensemble's."""
        self.lead = lead
        norm = lead.nerd_model.target_norm
        self._target_scale = torch.sqrt(norm.var + norm.eps).float().to(lead.torch_device)
        self._member_targets: torch.Tensor | None = None  # (K, N, P) of the last prediction

    @property
    def signature(self) -> RobotSignature:
        """The first member's signature (all members share its robot, layout and target)."""
        return self.lead.signature

    @property
    def num_envs(self) -> int:
        return self.lead.num_envs

    @property
    def frame_dt(self) -> float:
        return self.lead.frame_dt

    @property
    def check_nan(self) -> bool:
        return self.lead.check_nan

    @property
    def history_count(self) -> torch.Tensor:
        """(N,) valid history tokens per env of the first member (members with a shorter context keep fewer)."""
        return self.lead.history_count

    @property
    def keeps_data_range(self) -> bool:
        """Whether a member that reads the rollout's state (not a mirror member) keeps its training data's range."""
        return any(member.keeps_data_range for member in self.members if member.mirror is None)

    def outside_data(self, margin: float = 0.1) -> torch.Tensor | None:
        """(N,) whether the last token lies outside the training data of any member that keeps a range (see
        :meth:`NeRDIntegrator.outside_data`); None if none does. Mirror members (the ``mirror`` option) read the
        robot's mirror image, not the rollout's state, and are left out."""
        flags = [flag for flag in (member.outside_data(margin) for member in self.members if member.mirror is None)
                 if flag is not None]
        if not flags:
            return None
        return torch.stack(flags).any(dim=0)

    def set_nan_check(self, enabled: bool, deferred: bool = False) -> None:
        """See :meth:`NeRDIntegrator.set_nan_check` (the first member checks the ensemble's prediction)."""
        for member in self.members:
            member.set_nan_check(enabled, deferred)

    @property
    def nan_flags(self) -> torch.Tensor | None:
        """The first member's deferred NaN flags (:attr:`NeRDIntegrator.nan_flags`)."""
        return self.lead.nan_flags

    def raise_if_diverged(self) -> None:
        """See :meth:`NeRDIntegrator.raise_if_diverged`."""
        self.lead.raise_if_diverged()

    def clear_history(self, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Forget the history of ``env_ids`` (all envs if None) in every member."""
        for member in self.members:
            member.clear_history(env_ids)

    def observe(self, state: newton.State, control: newton.Control, contacts: newton.Contacts | None) -> None:
        """Record the token of ``state`` in every member without predicting."""
        self._record(state, control, contacts)

    def _record(self, state: newton.State, control: newton.Control, contacts: newton.Contacts | None
                ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None, torch.Tensor]:
        """Read the simulator once, push each member's own token; the first member's groups, anchor and states."""
        raw = self.lead.read_simulator(state, control, contacts)
        inputs = [member.build_inputs(*raw) for member in self.members]
        for member, (groups, _) in zip(self.members, inputs, strict=True):
            member.push_history(groups)
        groups, anchor = inputs[0]
        return groups, anchor, raw[0]

    @property
    def disagreement(self) -> torch.Tensor:
        """(N,) the members' disagreement at the last prediction (zeros before the first): the spread (standard
        deviation over members) of each target coordinate in units of the first model's target statistics,
        root-mean-squared over the coordinates. It needs no ground truth: it grows where the models part, e.g. in
        states they were not trained on. Computed when read, so a step whose caller never reads it pays nothing."""
        if self._member_targets is None:
            return torch.zeros(self.num_envs, device=self.lead.torch_device)
        with torch.inference_mode():
            spread = self._member_targets.std(dim=0, correction=0) / self._target_scale
            return spread.square().mean(dim=1).sqrt()

    @torch.inference_mode()
    def predict_targets(self) -> torch.Tensor:
        """The mean of the members' de-normalised relative targets (N, P); kept for :attr:`disagreement` (in place
        after the first step, so that a replayed step keeps it current)."""
        targets = [member.predict_targets() for member in self.members]
        shape = (len(targets), *targets[0].shape)
        if self._member_targets is None or self._member_targets.shape != shape:
            self._member_targets = torch.stack(targets)
        else:
            torch.stack(targets, out=self._member_targets)
        return self._member_targets.mean(dim=0)

    def step(self, state_in: newton.State, state_out: newton.State, control: newton.Control,
             contacts: newton.Contacts | None, dt: float, *, observables=None) -> None:
        """Advance one frame of ``dt`` with the members' mean prediction."""
        self.lead.check_frame_dt(dt)
        groups, anchor, states = self._record(state_in, control, contacts)
        self.lead.write_prediction(state_out, states, anchor, groups, self.predict_targets())

