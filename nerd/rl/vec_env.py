"""NeRDVecEnv: N parallel episodes of one task on a NeuralEnvironment, as an rl-games vec env.

Registered with rl-games the way GPU simulators are (an ``IVecEnv`` subclass, ``vecenv.register`` and
``env_configurations.register``), and exchanging torch tensors on the simulator's device:

* ``reset()`` -> observations (N, obs_dim), every env restarted;
* ``step(actions (N, A))`` -> observations (N, obs_dim), rewards (N,), dones (N,) uint8, infos with
  ``time_outs`` (N,) bool (rl-games bootstraps their value), ``terminated`` (N,) bool, ``diverged`` (N,) bool
  and ``reward_terms`` (the task's reward terms, (N,) each, summing to the rewards).

Envs that are done are reset inside ``step`` and the observation returned for them is the first one of their
new episode. Only those envs lose their NeRD history; the others keep theirs (the release cleared every env's
history whenever any env reset).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium
import numpy as np
import torch
from rl_games.common import env_configurations, vecenv
from rl_games.common.ivecenv import IVecEnv

from nerd.config import from_dict
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.integrator import NeRDEnsembleIntegrator
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.rl.config import RL_GAMES_ENV_NAME, RL_GAMES_VECENV_TYPE, RLEnvConfig
from nerd.rl.tasks import Task, task_class


class NeRDVecEnv(IVecEnv):
    """Vectorised episodes of ``task`` on ``nenv``.

    A neural state that is not finite ends that env's episode (reward 0, ``infos["diverged"]``) instead of
    stopping the whole batch, so one diverging env cannot end a training run.

    Args:
        nenv: The simulator, in neural or ground-truth mode.
        task: The task, built for ``nenv.num_envs`` envs.
        episode_length: Steps before a time-out; None for the task's own.
        seed: Seed of the reset distribution (and of per-episode task parameters).
        disagreement_penalty: In neural mode with an ensemble, subtract this times the members' disagreement
            (largest over the step's frames) from the reward, as the reward term ``disagreement`` (our option).
        disagreement_cutoff: In neural mode with an ensemble, terminate an episode whose disagreement exceeds
            this (our option); None: never.
        data_margin: With :attr:`track_outside_data`, flag the neural steps whose inputs lie beyond the model's
            training data by more than this fraction of each input's range (``infos["outside_data"]``).
        data_range_cutoff: In neural mode, terminate an episode at such a step (our option; the model must keep
            its training data's range).
        strict_data_range: Raise a UserError at the first such step (then checked every step).
    """

    def __init__(self, nenv: NeuralEnvironment, task: Task, episode_length: int | None = None, seed: int = 0,
                 disagreement_penalty: float = 0.0, disagreement_cutoff: float | None = None,
                 data_margin: float = 0.1, strict_data_range: bool = False, data_range_cutoff: bool = False):
        if task.robot != nenv.name:
            raise ValueError(f"task '{task.name}' is for {task.robot}, but the environment is {nenv.name}")
        if task.num_envs != nenv.num_envs:
            raise ValueError(f"task built for {task.num_envs} envs, environment has {nenv.num_envs}")
        self.nenv = nenv
        self.task = task
        self.num_envs = nenv.num_envs
        self.device = nenv.torch_device
        self.episode_length = episode_length or task.episode_length
        if self.episode_length < 1:
            raise ValueError(f"episode_length must be positive, got {self.episode_length}")
        self.generator = torch.Generator().manual_seed(seed)
        # Divergence is handled per env below rather than raised for the whole batch.
        nenv.set_nan_check(False)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (task.observation_dim,), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (nenv.action_dim,), np.float32)
        self.progress = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        """(N,) steps taken in each env's current episode."""
        self.last_actions = torch.zeros(self.num_envs, nenv.action_dim, device=self.device)
        """(N, A) actions of the last step (zero after a reset), clamped to [-1, 1]."""
        self.data_margin = data_margin
        self.strict_data_range = strict_data_range
        self.data_range_cutoff = data_range_cutoff
        self.track_outside_data = strict_data_range or data_range_cutoff
        """Report ``infos["outside_data"]`` in neural mode (playback and evaluation switch it on; training leaves
        it off unless ``data_range_cutoff`` needs it, so a step pays nothing for it)."""
        if data_range_cutoff and nenv.env_mode == NEURAL and not nenv.integrator.keeps_data_range:
            raise UserError("data_range_cutoff needs a NeRD model that keeps its training data's range; record it "
                            "with `python train/record_data_range.py`")
        self.disagreement_penalty = disagreement_penalty
        self.disagreement_cutoff = disagreement_cutoff
        self._uses_disagreement = disagreement_penalty > 0 or disagreement_cutoff is not None
        if self._uses_disagreement and nenv.env_mode == NEURAL and not isinstance(nenv.integrator,
                                                                                  NeRDEnsembleIntegrator):
            raise UserError("the disagreement penalty and cutoff need an ensemble: give several NeRD models "
                            "(nerd_model_path) or nerd_mirror")

    # ----------------------------------------------------------------------------------------------
    # rl-games interface
    def get_env_info(self) -> dict:
        """Spaces and agent/value counts, as rl-games asks for them."""
        return {"observation_space": self.observation_space, "action_space": self.action_space,
                "agents": 1, "value_size": 1}

    def get_number_of_agents(self) -> int:
        return 1

    def seed(self, seed: int) -> None:
        """Restart the reset distribution's random stream at ``seed``."""
        self.generator.manual_seed(seed)

    def reset(self) -> torch.Tensor:
        """Start a new episode in every env; returns observations (N, obs_dim)."""
        self.reset_envs(None)
        return self.observations()

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Apply actions (N, A) in [-1, 1] for the robot's ``control_steps`` frames (1 for most); done envs are
        reset (see the module docstring)."""
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device).clamp(-1.0, 1.0)
        # Start-of-frame contact depths, read before stepping (the release's termination sees them one frame stale).
        depths = self.nenv.get_contacts()["contact_depths"] if self.task.needs_contact_depths else None
        self.nenv.step(actions, check_finite=False)  # checked below, in the step's one host synchronisation
        outside = self._outside_data()
        disagreement = self._disagreement(None)
        for _ in range(self.nenv.control_steps - 1):
            # A controller that reads the state (PD) turns a diverged neural state into NaN torques, which the
            # simulator refuses; that env's episode ends below anyway, so it gets zero torques meanwhile (finite by
            # construction, so no check and no host synchronisation).
            self.nenv.step_with_joint_act(torch.nan_to_num(self.nenv.compute_torques(actions), 0.0, 0.0, 0.0),
                                          check_finite=False)
            disagreement = self._disagreement(disagreement)
        joint_acts = self.nenv.joint_acts
        states = self.nenv.get_states()
        self.progress += 1
        self.last_actions = actions
        finite = torch.isfinite(states).all(dim=1)
        zero = torch.zeros((), device=self.device)
        terms = {name: torch.where(finite, value, zero)
                 for name, value in self.task.reward_terms(states, actions, joint_acts).items()}
        terminated = self.task.terminations(states, depths) | ~finite
        if disagreement is not None:
            # A diverged env's disagreement may be NaN; its reward is 0 like every other term's.
            disagreement = torch.where(finite, disagreement, zero)
            if self.disagreement_penalty > 0:
                terms["disagreement"] = -self.disagreement_penalty * disagreement
            if self.disagreement_cutoff is not None:
                terminated = terminated | (disagreement > self.disagreement_cutoff)
        if self.data_range_cutoff and outside is not None:
            terminated = terminated | outside
        rewards = torch.stack(list(terms.values())).sum(dim=0)
        time_outs = (self.progress >= self.episode_length) & ~terminated
        dones = terminated | time_outs
        # The step's one host synchronisation: how many envs are done, and whether the actions were finite.
        num_done, num_bad = torch.stack([dones.sum(), (~torch.isfinite(actions)).sum()]).tolist()
        if num_bad:
            raise UserError(f"{self.nenv.name}: actions contain NaN or inf (the step was taken with them)")
        if num_done:
            self.reset_envs(torch.nonzero_static(dones, size=num_done).flatten())
            states = self.nenv.get_states()
        infos = {"time_outs": time_outs, "terminated": terminated, "diverged": ~finite, "reward_terms": terms}
        if disagreement is not None:
            infos["disagreement"] = disagreement
        if outside is not None:
            infos["outside_data"] = outside
        return self.task.observations(states, self.last_actions), rewards, dones.to(torch.uint8), infos

    def _outside_data(self) -> torch.Tensor | None:
        """(N,) whether the step's first frame read inputs beyond the model's training data (None when not tracked,
        in ground-truth mode, or for a model without a range)."""
        if not self.track_outside_data or self.nenv.env_mode != NEURAL:
            return None
        outside = self.nenv.outside_data(self.data_margin)
        if outside is not None and self.strict_data_range and bool(outside.any()):
            raise UserError(f"{self.nenv.name}: {int(outside.sum())} of {self.num_envs} envs read inputs beyond the "
                            f"NeRD model's training data (margin {self.data_margin:g} of each input's range); "
                            "NeRD extrapolates there")
        return outside

    def _disagreement(self, so_far: torch.Tensor | None) -> torch.Tensor | None:
        """The ensemble's disagreement of the frame just stepped, the largest of the step's frames so far; None when
        neither the penalty nor the cutoff is on (nothing is computed then)."""
        if not self._uses_disagreement or self.nenv.env_mode != NEURAL:
            return None
        now = self.nenv.integrator.disagreement
        return now if so_far is None else torch.maximum(so_far, now)

    # ----------------------------------------------------------------------------------------------
    def reset_envs(self, env_ids: torch.Tensor | None) -> None:
        """Start new episodes in ``env_ids`` (all if None); only their NeRD histories are cleared."""
        ids = torch.arange(self.num_envs, device=self.device) if env_ids is None else env_ids.to(self.device)
        states = self.nenv.sample_reset_states(len(ids), self.generator)
        self.nenv.reset(env_ids=None if env_ids is None else ids, states=states)
        self.task.reset(ids, self.generator)
        self.progress[ids] = 0
        self.last_actions[ids] = 0.0

    def observations(self) -> torch.Tensor:
        """Observations (N, obs_dim) of the current states."""
        return self.task.observations(self.nenv.get_states(), self.last_actions)


def check_env_config(cfg: RLEnvConfig) -> type[Task]:
    """Check ``cfg`` before anything is built or written; returns the task class.

    Raises:
        ValueError: Unknown robot or task, a non-positive env count, or neural mode without a model.
        FileNotFoundError: The model file does not exist.
    """
    cls = task_class(cfg.robot, cfg.task)
    if cfg.num_envs < 1:
        raise UserError(f"num_envs must be positive, got {cfg.num_envs}")
    if cfg.env_mode == NEURAL:
        if not cfg.nerd_model_path:
            raise UserError("neural mode needs a NeRD model: pass --nerd-model-path (or set env.nerd_model_path), "
                             "or use --env-mode ground-truth")
        paths = [cfg.nerd_model_path] if isinstance(cfg.nerd_model_path, str) else cfg.nerd_model_path
        for path in paths:
            if not Path(path).is_file():
                raise FileNotFoundError(f"NeRD model not found: {path}; pass --nerd-model-path (a relative path in a "
                                        "config is looked up from the working directory, the repository root and "
                                        "the config's folder)")
    return cls


def make_vec_env(cfg: RLEnvConfig, device: str = "cpu", seed: int = 0) -> NeRDVecEnv:
    """Build the simulator and task of ``cfg`` (the NeRD model is loaded in neural mode only).

    Raises:
        ValueError, FileNotFoundError: See :func:`check_env_config`; also a model for another robot.
    """
    cls = check_env_config(cfg)
    env = make_env(cfg.robot, cfg.num_envs, device=device, solver=cfg.solver,
                   mass_matrix_refresh=cfg.mass_matrix_refresh, contact_friction=cfg.contact_friction,
                   robot_variant=cfg.robot_variant, control_mode=cfg.control_mode)
    if cfg.env_mode == NEURAL:
        nenv = NeuralEnvironment.from_checkpoint(env, cfg.nerd_model_path, NEURAL, cfg.compile_nerd_model,
                                                 cfg.nerd_mirror, cfg.capture_nerd_frame)
    else:
        nenv = NeuralEnvironment(env, None, env_mode=GROUND_TRUTH)
    return NeRDVecEnv(nenv, cls(cfg.num_envs, nenv.torch_device), cfg.episode_length, seed,
                      cfg.disagreement_penalty, cfg.disagreement_cutoff, cfg.data_margin, cfg.strict_data_range,
                      cfg.data_range_cutoff)


def _create_from_env_config(num_actors: int | None = None, **env_config) -> NeRDVecEnv:
    """rl-games' creator: ``env_config`` is ``{"env": RLEnvConfig as a dict, "device": str, "seed": int}``."""
    cfg = from_dict(RLEnvConfig, env_config["env"], prefix="env")
    if num_actors is not None and num_actors != cfg.num_envs:
        raise UserError(f"rl-games asks for {num_actors} actors but the env config has {cfg.num_envs} envs")
    return make_vec_env(cfg, env_config.get("device", "cpu"), env_config.get("seed", 0))


def register_with_rl_games() -> None:
    """Register the vec env type and the env name with rl-games (idempotent)."""
    vecenv.register(RL_GAMES_VECENV_TYPE, lambda config_name, num_actors, **kwargs:
                    env_configurations.configurations[config_name]["env_creator"](num_actors=num_actors, **kwargs))
    env_configurations.register(RL_GAMES_ENV_NAME, {"vecenv_type": RL_GAMES_VECENV_TYPE,
                                                    "env_creator": _create_from_env_config})
