"""NeuralEnvironment: one robot environment that steps with either the ground-truth solver or NeRD.

``set_env_mode("neural" | "ground-truth")`` swaps the learned :class:`~nerd.integrator.NeRDIntegrator` for the
analytical solver at any step. Everything else (controllers, torques, contacts, states, resets) is the wrapped
:class:`~nerd.envs.environment.Environment`'s, so code written against :class:`~nerd.envs.protocol.RobotEnv`
cannot tell the modes apart except by the numbers. In ground-truth mode the NeRD history is still recorded, so
switching to neural mid-rollout starts from a full history.

With ``capture_frame`` (our option, for GPUs) a neural frame (features, network, integration, forward kinematics
and the contact refresh) is one CUDA graph, recorded once and replayed (:class:`~nerd.envs.interop.FrameGraph`);
on a CPU the same code runs uncaptured.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from nerd.checkpoint import load_checkpoint
from nerd.envs.environment import Environment
from nerd.envs.interop import FrameGraph
from nerd.errors import UserError
from nerd.features import (
    JOINT_LIMIT_LOOKAHEAD,
    JOINT_LIMITS,
    check_checkpoint_for_env,
    robot_mirror_signs,
    signature_of_env,
    with_model_options,
)
from nerd.integrator import NeRDEnsembleIntegrator, NeRDIntegrator
from nerd.models.nerd_model import NeRDModel
from nerd.modes import ENV_MODES, GROUND_TRUTH, NEURAL

NAN_CHECK_FRAMES = 16
"""With ``capture_frame``: neural frames between two reads of the NaN flags the frames write on the device. A
divergence is raised up to this many frames late (the frames in between run on with non-finite states); resets
read the flags too, so an episode's end never hides one."""


class NeuralEnvironment:
    """A :class:`~nerd.envs.protocol.RobotEnv` that steps ``env`` with NeRD or with its own solver.

    Args:
        env: The robot environment (with its fixed-size contacts); robot-specific calls go to it directly.
        nerd_model: A trained model for this robot, several (an ensemble that steps with their mean prediction,
            :class:`~nerd.integrator.NeRDEnsembleIntegrator`), or None (ground-truth mode only).
        env_mode: Initial mode, ``"neural"`` or ``"ground-truth"``.
        history_length: NeRD history H the model was trained with (one per model for an ensemble).
        compile_model: Run the per-step prediction through ``torch.compile`` (our option; on the project's CPU
            it made the model ~20 % faster after about a minute of compilation, see docs/notebook/results.md).
        mirror: Our option, for robots with a reflection symmetry (``Environment.mirror_joint_signs``): every model
            also steps the mirror image of the robot, and the ensemble averages both predictions (two network calls
            per model; see :class:`~nerd.integrator.NeRDIntegrator`'s ``mirror_signs``).
        capture_frame: Our option, for GPUs: run every neural frame as one replayed CUDA graph (a GPU runs the
            uncaptured frame as a sequence of small launches, each waiting for the host). The NaN check then reads
            a flag every ``nan_check_frames`` frames and at resets instead of after every frame. On a CPU the same
            code runs uncaptured, with the same deferred check.
        nan_check_frames: With ``capture_frame``: frames between two reads of the NaN flags
            (:data:`NAN_CHECK_FRAMES`).
    """

    def __init__(self, env: Environment, nerd_model: NeRDModel | Sequence[NeRDModel] | None = None,
                 env_mode: str = NEURAL, history_length: int | Sequence[int] = 10, compile_model: bool = False,
                 mirror: bool = False, capture_frame: bool = False, nan_check_frames: int = NAN_CHECK_FRAMES):
        self.env = env
        """The wrapped robot environment."""
        self.name, self.num_envs, self.frame_dt = env.name, env.num_envs, env.frame_dt
        self.control_steps = env.control_steps
        """Frames per policy action in RL tasks (the robot's control mode's)."""
        self.torch_device = env.torch_device
        models = [] if nerd_model is None else [nerd_model] if isinstance(nerd_model, NeRDModel) else list(nerd_model)
        lengths = [history_length] * len(models) if isinstance(history_length, int) else list(history_length)
        if len(lengths) != len(models):
            raise UserError(f"{len(models)} NeRD models but {len(lengths)} history lengths")
        mirrors = [None, robot_mirror_signs(env.name)] if mirror and models else [None]
        members = [self._integrator(model, length, compile_model, signs)
                   for model, length in zip(models, lengths, strict=True) for signs in mirrors]
        self.integrator: NeRDIntegrator | NeRDEnsembleIntegrator | None = (
            None if not members else members[0] if len(members) == 1 else NeRDEnsembleIntegrator(members))
        """The learned solver: one model's integrator, or an ensemble's when several models are given."""
        # The signature of the (first) model: a model that reads joint limits (our options joint_limit_inputs,
        # joint_limit_lookahead) has their groups.
        self.signature = self.integrator.signature if self.integrator is not None else signature_of_env(env)
        if nan_check_frames < 1:
            raise UserError(f"nan_check_frames must be at least 1, got {nan_check_frames}")
        self.nan_check_frames = nan_check_frames
        self.frame_graph = (FrameGraph(self._neural_frame, env.device)
                            if capture_frame and self.integrator is not None else None)
        """With ``capture_frame``: the neural frame (:class:`~nerd.envs.interop.FrameGraph`; ``captured`` once a GPU
        has recorded it); None otherwise."""
        self._unchecked_frames = 0
        if self.capture_frame:
            self.integrator.set_nan_check(True, deferred=True)
        self.env_mode = ""
        self.set_env_mode(env_mode)

    @property
    def capture_frame(self) -> bool:
        """Whether neural frames run as a :class:`~nerd.envs.interop.FrameGraph` (replayed on a GPU)."""
        return self.frame_graph is not None

    def _integrator(self, nerd_model: NeRDModel, history_length: int, compile_model: bool,
                    mirror_signs: Sequence[float] | None = None) -> NeRDIntegrator:
        """The integrator of one model on this environment (the signature its input groups ask for)."""
        env, groups = self.env, nerd_model.input_groups
        # The model's own options (input frame, contact inputs, prediction) ride in its config.
        signature = with_model_options(signature_of_env(env, joint_limit_inputs=JOINT_LIMITS in groups,
                                                        joint_limit_lookahead=JOINT_LIMIT_LOOKAHEAD in groups),
                                       nerd_model.cfg)
        return NeRDIntegrator(
            env.model, nerd_model.to(env.torch_device).eval(), signature, num_envs=env.num_envs,
            anchor_body=env.anchor_body, act_dof_indices=env.act_dof_indices, frame_dt=env.frame_dt,
            history_length=history_length, compile_model=compile_model, mirror_signs=mirror_signs,
        )

    @classmethod
    def from_checkpoint(cls, env: Environment, path: str | Path | Sequence[str | Path], env_mode: str = NEURAL,
                        compile_model: bool = False, mirror: bool = False, capture_frame: bool = False
                        ) -> NeuralEnvironment:
        """Load a NeRD checkpoint for ``env``, or several as an ensemble (:class:`NeRDEnsembleIntegrator`, our
        option), each also mirrored with ``mirror`` (our option), stepped as a graph with ``capture_frame`` (our
        option); a checkpoint for another robot or layout is a ValueError."""
        paths = [path] if isinstance(path, (str, Path)) else list(path)
        models, lengths = [], []
        for one in paths:
            nerd_model, signature, payload = load_checkpoint(one, device=env.torch_device)
            # The model options are the checkpoint's own (load_checkpoint checked them against its model config).
            check_checkpoint_for_env(signature, env)
            models.append(nerd_model)
            lengths.append(payload["history_length"])
        return cls(env, models, env_mode, history_length=lengths, compile_model=compile_model, mirror=mirror,
                   capture_frame=capture_frame)

    # ----------------------------------------------------------------------------------------------
    # mode
    def set_env_mode(self, env_mode: str) -> None:
        """Step with ``"neural"`` (NeRD) or ``"ground-truth"`` (the analytical solver) from now on."""
        if env_mode not in ENV_MODES:
            raise UserError(f"unknown env mode '{env_mode}'; valid modes: {', '.join(ENV_MODES)}")
        if env_mode == NEURAL and self.integrator is None:
            raise UserError("neural mode needs a NeRD model; pass nerd_model or use from_checkpoint()")
        self.env_mode = env_mode

    def outside_data(self, margin: float = 0.1) -> torch.Tensor | None:
        """(N,) whether the inputs of the last NeRD step (or the last ground-truth frame's, as NeRD would read them)
        left the model's training data by more than ``margin`` of each input's range; None without a model or a
        model that keeps no range (:meth:`~nerd.integrator.NeRDIntegrator.outside_data`)."""
        return None if self.integrator is None else self.integrator.outside_data(margin)

    def set_nan_check(self, enabled: bool) -> None:
        """Raise on a non-finite neural state (on, the default) or leave divergence to the caller (off)."""
        if self.integrator is not None:
            self.integrator.set_nan_check(enabled, deferred=self.capture_frame)
        if self.frame_graph is not None:
            self.frame_graph.reset()  # the recorded frame writes the flags or not
            self._unchecked_frames = 0

    def check_diverged(self) -> None:
        """With ``capture_frame``: raise now for a divergence (or non-finite torques) the frames since the last check
        recorded on the device (one host synchronisation); nothing to do otherwise."""
        if self.capture_frame:
            self._unchecked_frames = 0
            self.integrator.raise_if_diverged()

    # ----------------------------------------------------------------------------------------------
    # RobotEnv: stepping and resets
    def step(self, actions: torch.Tensor, check_finite: bool = True) -> None:
        """Advance one frame with policy actions (N, action_dim) through the robot's controller.

        ``check_finite=False``: the caller checks the actions for NaN/inf itself (the RL vec env, in its one host
        synchronisation per step).
        """
        self.env.check_actions(actions)
        self.step_with_joint_act(self.env.compute_torques(actions), check_finite)

    def step_with_joint_act(self, joint_acts: torch.Tensor, check_finite: bool = True) -> None:
        """Advance one frame with joint torques (N, act_dim), in the current mode (``check_finite``: see
        :meth:`step`)."""
        env = self.env
        # In neural mode with its NaN check on, the integrator checks these torques in its own single host
        # synchronisation (it reads them back from the control), so the environment does not check them too.
        neural_checks = self.env_mode == NEURAL and self.integrator.check_nan
        env.apply_joint_act(joint_acts, check_finite=check_finite and not neural_checks)
        if self.env_mode == GROUND_TRUTH:
            if self.integrator is not None:
                self.integrator.observe(env.state_0, env.control, env.contacts)
            env.simulate_frame()
            if check_finite:
                env.check_states_finite()
            return
        if self.frame_graph is None:
            self._neural_frame()
            return
        self.frame_graph()
        self._unchecked_frames += 1
        if self._unchecked_frames >= self.nan_check_frames:
            self.check_diverged()

    def _neural_frame(self) -> None:
        """One NeRD frame from the torques in the control: the prediction, the new state and its contacts."""
        env = self.env
        self.integrator.step(env.state_0, env.state_0, env.control, env.contacts, env.frame_dt)
        env.refresh_contacts()

    def reset(self, env_ids: Sequence[int] | torch.Tensor | None = None, states: torch.Tensor | None = None,
              generator: torch.Generator | None = None) -> None:
        """Reset ``env_ids`` (all if None) to ``states`` or random ones; only their NeRD histories are cleared."""
        self.check_diverged()  # before the reset clears the flags of the envs it restarts
        self.env.reset(env_ids, states, generator)
        if self.integrator is not None:
            self.integrator.clear_history(env_ids)

    def set_states(self, states: torch.Tensor, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Overwrite states; the written envs start a new NeRD history (their past no longer applies)."""
        self.check_diverged()
        self.env.set_states(states, env_ids)
        if self.integrator is not None:
            self.integrator.clear_history(env_ids)

    # ----------------------------------------------------------------------------------------------
    # RobotEnv: the robot's own, unchanged by the mode
    @property
    def state_dim(self) -> int:
        """S = dof_q + dof_qd."""
        return self.env.state_dim

    @property
    def action_dim(self) -> int:
        """Width of the policy actions."""
        return self.env.action_dim

    @property
    def contact_count(self) -> int:
        """Contact candidates C per env."""
        return self.env.contact_count

    def get_states(self) -> torch.Tensor:
        """Copy of the current states (N, S), world frame."""
        return self.env.get_states()

    @property
    def joint_acts(self) -> torch.Tensor:
        """Torques (N, J) applied in the last frame (the controller's output), in either mode."""
        return self.env.joint_acts

    def get_root_body_q(self) -> torch.Tensor:
        """Pose of each env's anchor body (N, 7), world frame."""
        return self.env.get_root_body_q()

    def get_contacts(self) -> dict[str, torch.Tensor]:
        """Contact features of the current state, world frame."""
        return self.env.get_contacts()

    def get_body_q(self) -> torch.Tensor:
        """Poses of all bodies (N, bodies_per_env, 7), world frame."""
        return self.env.get_body_q()

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """The robot's controller."""
        return self.env.compute_torques(actions)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """The robot's task reset (n, S), world frame."""
        return self.env.sample_reset_states(n, generator)
