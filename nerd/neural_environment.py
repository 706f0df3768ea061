"""NeuralEnvironment: one robot environment that steps with either the ground-truth solver or NeRD.

``set_env_mode("neural" | "ground-truth")`` swaps the learned :class:`~nerd.integrator.NeRDIntegrator` for the
analytical solver at any step. Everything else (controllers, torques, contacts, states, resets) is shared, so
code written against this class cannot tell the modes apart except by the numbers. In ground-truth mode the
NeRD history is still recorded, so switching to neural mid-rollout starts from a full history.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from nerd.checkpoint import load_checkpoint
from nerd.contacts import AbstractContactEnvironment
from nerd.features import signature_of_env
from nerd.integrator import NeRDIntegrator
from nerd.models.nerd_model import NeRDModel

ENV_MODES = ("neural", "ground-truth")


class NeuralEnvironment:
    """Wraps an :class:`AbstractContactEnvironment`; attributes it lacks are delegated to it.

    Args:
        env: The robot environment with its fixed-size contacts.
        nerd_model: A trained model for this robot, or None (ground-truth mode only).
        env_mode: Initial mode, ``"neural"`` or ``"ground-truth"``.
        history_length: NeRD history H.
    """

    def __init__(self, env: AbstractContactEnvironment, nerd_model: NeRDModel | None = None,
                 env_mode: str = "neural", history_length: int = 10):
        self.env = env
        self.signature = signature_of_env(env)
        self.integrator: NeRDIntegrator | None = None
        if nerd_model is not None:
            nerd_model = nerd_model.to(env.torch_device).eval()
            self.integrator = NeRDIntegrator(
                env.model, nerd_model, self.signature, num_envs=env.num_envs, anchor_body=env.anchor_body,
                act_dof_indices=env.act_dof_indices, frame_dt=env.frame_dt, history_length=history_length,
            )
        self.env_mode = ""
        self.set_env_mode(env_mode)

    @classmethod
    def from_checkpoint(cls, env: AbstractContactEnvironment, path: str | Path, env_mode: str = "neural"
                        ) -> NeuralEnvironment:
        """Load a NeRD checkpoint for ``env``; a checkpoint for another robot or layout is a ValueError."""
        nerd_model, signature, payload = load_checkpoint(path, device=env.torch_device)
        signature.check_compatible(signature_of_env(env))
        history_length = payload.get("config", {}).get("history_length")
        if not isinstance(history_length, int) or isinstance(history_length, bool) or history_length < 1:
            raise ValueError(f"{path}: the checkpoint's config does not state a valid history_length "
                             f"(got {history_length!r})")
        return cls(env, nerd_model, env_mode, history_length=history_length)

    def __getattr__(self, name: str):
        return getattr(self.env, name)

    def set_env_mode(self, env_mode: str) -> None:
        """Step with ``"neural"`` (NeRD) or ``"ground-truth"`` (the analytical solver) from now on."""
        if env_mode not in ENV_MODES:
            raise ValueError(f"unknown env mode '{env_mode}'; valid modes: {', '.join(ENV_MODES)}")
        if env_mode == "neural" and self.integrator is None:
            raise ValueError("neural mode needs a NeRD model; pass nerd_model or use from_checkpoint()")
        self.env_mode = env_mode

    def step(self, actions: torch.Tensor) -> None:
        """Advance one frame with policy actions (N, action_dim) through the robot's controller."""
        self.env.check_actions(actions)
        self.step_with_joint_act(self.env.compute_torques(actions))

    def step_with_joint_act(self, joint_acts: torch.Tensor) -> None:
        """Advance one frame with joint torques (N, act_dim), in the current mode."""
        env = self.env
        env.apply_joint_act(joint_acts)
        if self.env_mode == "ground-truth":
            if self.integrator is not None:
                groups, _, _ = self.integrator.current_inputs(env.state_0, env.control, env.contacts)
                self.integrator.push_history(groups)
            env.simulate_frame()
            return
        self.integrator.step(env.state_0, env.state_0, env.control, env.contacts, env.frame_dt)
        env.refresh_contacts()

    def reset(self, env_ids: Sequence[int] | torch.Tensor | None = None, states: torch.Tensor | None = None,
              generator: torch.Generator | None = None) -> None:
        """Reset ``env_ids`` (all if None) to ``states`` or random ones; only their NeRD histories are cleared."""
        self.env.reset(env_ids, states, generator)
        if self.integrator is not None:
            self.integrator.reset(env_ids)

    def set_states(self, states: torch.Tensor, env_ids: Sequence[int] | torch.Tensor | None = None) -> None:
        """Overwrite states; the written envs start a new NeRD history (their past no longer applies)."""
        self.env.set_states(states, env_ids)
        if self.integrator is not None:
            self.integrator.reset(env_ids)
