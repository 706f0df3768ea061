"""RL run configuration: our own ``env`` section, validated into dataclasses, plus rl-games ``params`` passed through.

A file under ``cfg/rl/<Robot>/<task>.yaml`` has two top-level keys:

* ``env`` -> :class:`RLEnvConfig` (robot, task, simulator, env count), validated like every nerd config;
* ``params`` -> the rl-games configuration (``algo``, ``model``, ``network``, ``config``), handed to rl-games
  after :func:`resolve_params` fills in what depends on the command line (device, seed, run directory, env
  count). The top-level keys and those of ``params.config`` must be ones rl-games reads (a typo is an error);
  the sections ``algo``, ``model`` and ``network`` pass through to rl-games unchecked beyond the few keys nerd
  relies on, so a misspelt key there is ignored by rl-games: the run's ``config.yaml`` shows what it was given.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nerd.config import ConfigError, check_range, load_config, to_dict
from nerd.distributed import device_for_rank, rank_from_env
from nerd.errors import UserError
from nerd.modes import NEURAL, EnvMode
from nerd.paths import REPO_ROOT

RL_GAMES_ENV_NAME = "nerd"
"""Name under which the vec env is registered with rl-games (``env_configurations``)."""
RL_GAMES_VECENV_TYPE = "NERD"
"""rl-games vec env type (``vecenv``) of :class:`~nerd.rl.vec_env.NeRDVecEnv`."""
RL_GAMES_PARAMS_KEYS = frozenset({"algo", "model", "network", "config", "seed", "torch_threads"})
"""Keys rl-games reads at the top level of ``params`` (``rl_games.torch_runner.Runner``)."""
RL_GAMES_CONFIG_KEYS = frozenset({
    "actor_betas", "actor_lr", "adv_rms_momentum", "alpha_lr", "alphas_betas", "balance_env_rewards", "batch_size",
    "bound_loss_type", "bounds_loss_coef", "bptt_length", "central_value_config", "check_scores", "clip_actions",
    "clip_value", "config", "critic_betas", "critic_coef", "critic_grad_clip", "critic_lr", "critic_mode",
    "critic_tau", "deterministic", "device", "device_name", "dir_to_monitor", "e_clip", "entropy_coef", "env_args",
    "env_config", "env_info", "env_name", "env_update_num", "epochs_between_resets", "evaluation", "experiments",
    "features", "fixed_sigma", "freeze_critic", "full_experiment_name", "games_num", "games_to_check",
    "games_to_track", "gamma", "grad_norm", "horizon_length", "init_alpha", "input_shape", "is_train",
    "kl_threshold", "learnable_temperature", "learning_rate", "log_path", "lr_schedule", "max_epochs", "max_frames",
    "max_steps", "mini_epochs", "minibatch_size", "minibatch_size_per_env", "mixed_precision", "mode",
    "mu_activation", "mu_init", "multi_gpu", "n_game_life", "name", "network", "network_path",
    "normalize_advantage", "normalize_input", "normalize_rms_advantage", "normalize_value", "num_actors",
    "num_steps_per_episode", "num_updates_per_step", "num_warmup_frames", "num_warmup_steps", "object_store_memory",
    "params", "pbt_idx", "player", "policy_frequency", "population_based_training", "ppo", "print_stats", "render",
    "render_sleep", "replay_buffer_size", "reward_shaper", "save_best_after", "save_frequency", "schedule_entropy",
    "schedule_type", "score_to_win", "self_play", "self_play_config", "seq_length", "sigma_activation",
    "sigma_init", "start_exp", "start_sub_exp", "target_entropy_coef", "tau", "train_dir", "truncate_grads",
    "update_checkpoint_freq", "update_score", "use_action_masks", "use_best_prev_result", "use_diagnostics",
    "use_experimental_cv", "use_smooth_clamp", "use_vecenv", "value_bootstrap", "value_size", "vec_env",
    "weight_decay", "zero_rnn_on_done"
})
"""Every key the pinned rl-games reads from a ``config`` mapping (``config[...]``/``config.get(...)`` anywhere in
its source; a test keeps this in step with the installed version). ``params.config`` keys outside it are refused,
so a typo is an error rather than a silently ignored setting."""


@dataclass
class RLEnvConfig:
    """The simulator and task an RL policy trains or plays in."""

    robot: str
    """Robot name, e.g. ``Cartpole`` or ``Ant``."""
    task: str
    """Task name for that robot (``nerd.rl.tasks.TASKS``): ``swingup``; ``run``, ``spin``, ``spin_track``; ``reach``."""
    num_envs: int = 2048
    """Parallel envs N (rl-games' ``num_actors``)."""
    env_mode: EnvMode = NEURAL
    """Step with the NeRD model or the analytical solver."""
    nerd_model_path: str | list[str] | None = None
    """NeRD checkpoint, needed in neural mode only; a list of checkpoints steps as their ensemble (mean prediction,
    our option). A relative path in a config file is looked up as :func:`resolve_model_path` says: the working
    directory, then the repository root, then the config's folder."""
    nerd_mirror: bool = False
    """Average each NeRD model's prediction with its prediction for the robot's mirror image (our option, for robots
    with ``Environment.mirror_joint_signs``: the Cartpole; two network calls per model)."""
    episode_length: int | None = None
    """Steps before a time-out; None keeps the task's own (Cartpole 300, Ant 500)."""
    solver: str | None = None
    """Ground-truth solver; None for the robot's default (Featherstone)."""
    mass_matrix_refresh: str | None = None
    """Featherstone's mass-matrix refresh, ``"frame"`` or ``"substep"``; None for the robot's default (frame)."""
    contact_friction: str | None = None
    """Ground-contact friction law, ``"coulomb"`` or ``"huber"``; None for the robot's default (coulomb)."""
    robot_variant: str | None = None
    """Variant of robots with several (Anymal: ``"physical"``, ``"release"``; CubeToss: ``"sim"``, ``"real"``); None
    for the default."""
    control_mode: str | None = None
    """Controller of robots that offer several (Franka: ``"torque"`` or ``"position"``, the joint-position PD,
    which also holds each action for 2 frames; Anymal: ``"position"`` or ``"torque"``); None for the robot's
    default."""
    disagreement_penalty: float = 0.0
    """Our option, for an ensemble (several ``nerd_model_path`` or ``nerd_mirror``): subtract this times the
    members' disagreement (:attr:`~nerd.integrator.NeRDEnsembleIntegrator.disagreement`, the largest over the frames
    of a policy step) from every reward in neural mode, so that PPO does not seek the states the models disagree
    on, where it would exploit their errors (the penalty of model-based offline RL, MOPO). 0: off. Playback and batch
    evaluation report the task's reward without it."""
    disagreement_cutoff: float | None = None
    """Our option, for an ensemble: end an episode (as a termination) once the members' disagreement exceeds this,
    in neural mode (MOReL's cut of unknown states). None: off; playback and batch evaluation ignore it."""
    data_range_cutoff: bool = False
    """Our option, for a model that keeps its training data's range (one model or an ensemble): end an episode (as a
    termination) at the first neural step whose inputs lie beyond that range by more than ``data_margin``, so that
    PPO cannot live where the model extrapolates (MOReL's cut of unknown states, judged by the data instead of by an
    ensemble). Like ``disagreement_cutoff``, it suits tasks whose per-step rewards are mostly positive (an alive
    bonus): where they are negative, an early end pays. False: off; playback and batch evaluation ignore it."""
    data_margin: float = 0.1
    """Playback and batch evaluation in neural mode count the steps whose inputs lie beyond the NeRD model's
    training data by more than this fraction of each input's range (models that keep their range); the margin of
    ``data_range_cutoff`` and ``strict_data_range`` too."""
    strict_data_range: bool = False
    """Stop with an error at the first neural step beyond the training data (with ``data_margin``)."""
    compile_nerd_model: bool = False
    """Run the NeRD model's per-step prediction through ``torch.compile`` (our option: 1.3x faster on the
    project's CPU after about a minute of compilation, docs/notebook/results.md)."""
    capture_nerd_frame: bool = False
    """Run each neural frame (features, model, integration, contact refresh) as one CUDA graph, recorded once and
    replayed (our option, for GPUs: :class:`~nerd.neural_environment.NeuralEnvironment`'s ``capture_frame``; on a CPU
    the same code runs uncaptured)."""

    def __post_init__(self) -> None:
        check_range("disagreement_penalty", self.disagreement_penalty, low=0)
        check_range("disagreement_cutoff", self.disagreement_cutoff, low=0, low_open=True)
        check_range("data_margin", self.data_margin, low=0)

    def for_evaluation(self) -> RLEnvConfig:
        """A copy that reports the task's own reward: no disagreement penalty, no cutoff."""
        return replace(self, disagreement_penalty=0.0, disagreement_cutoff=None, data_range_cutoff=False)


@dataclass
class RLConfig:
    """A whole RL config file."""

    env: RLEnvConfig
    """Simulator and task."""
    params: dict[str, Any] = field(default_factory=dict)
    """rl-games parameters, passed through (see the module docstring)."""


RUN_DIR_ENTRIES = ("nn", "summaries", "config.yaml", "git.yaml", "train_summary.json")
"""What a training run writes in its directory (and what ``--overwrite`` removes first, see
:func:`nerd.run_dir.clear_run_dir`)."""


def resolve_model_path(path: str, config_path: str | Path) -> str:
    """Where a model path written in the config file ``config_path`` points.

    An absolute path is kept. A relative one is looked up, in this order, and the first existing file wins:

    1. the working directory (the path as written, unchanged);
    2. the repository root (:data:`nerd.paths.REPO_ROOT`): shipped configs name ``pretrained_models/...`` this
       way, so they work from any directory;
    3. the config file's folder (a config kept next to its model).

    A path found in 2 or 3 is returned absolute. When none exists, the path is returned as written, so that the
    error that follows names what the config says.
    """
    if Path(path).is_absolute() or Path(path).is_file():
        return path
    for base in (REPO_ROOT, Path(config_path).resolve().parent):
        if (base / path).is_file():
            return str(base / path)
    return path


def load_rl_config(path: str | Path, overrides: list[str] | None = None) -> RLConfig:
    """Read and validate an RL config file (``key.sub=value`` overrides applied first).

    A relative ``env.nerd_model_path`` is resolved by :func:`resolve_model_path`.
    """
    cfg = load_config(path, RLConfig, overrides)
    check_params(cfg.params)
    model = cfg.env.nerd_model_path
    if isinstance(model, str):
        cfg.env.nerd_model_path = resolve_model_path(model, path)
    elif model:
        cfg.env.nerd_model_path = [resolve_model_path(p, path) for p in model]
    return cfg


def run_config_of(checkpoint: str | Path) -> Path:
    """The ``config.yaml`` of the run a policy checkpoint belongs to: beside it, or one folder up (``<run>/nn/``).

    Raises:
        UserError: If neither exists (then the config has to be named with ``--rl-cfg``).
    """
    checkpoint = Path(checkpoint)
    candidates = [checkpoint.parent / "config.yaml", checkpoint.parent.parent / "config.yaml"]
    for path in candidates:
        if path.is_file():
            return path
    raise UserError(f"no config.yaml beside {checkpoint} or one folder up; name its RL config with --rl-cfg")


def check_params(params: dict[str, Any]) -> None:
    """Check the rl-games keys nerd depends on, so a broken file fails before any env is built."""
    for key in ("algo", "model", "network", "config"):
        if not isinstance(params.get(key), dict):
            raise ConfigError(f"config key 'params.{key}' is missing or not a mapping (rl-games needs it)")
    if params["algo"].get("name") != "a2c_continuous":
        raise ConfigError(f"config key 'params.algo.name': nerd's tasks have continuous actions, use "
                          f"'a2c_continuous', got {params['algo'].get('name')!r}")
    unknown = sorted(set(params) - RL_GAMES_PARAMS_KEYS)
    if unknown:
        raise ConfigError(f"unknown config key 'params.{unknown[0]}' (rl-games reads "
                          f"{', '.join(sorted(RL_GAMES_PARAMS_KEYS))})")
    config = params["config"]
    for key in sorted(config):
        if key not in RL_GAMES_CONFIG_KEYS:
            close = difflib.get_close_matches(key, RL_GAMES_CONFIG_KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"unknown config key 'params.config.{key}': rl-games does not read it{hint}")
    for key in ("horizon_length", "minibatch_size", "mini_epochs"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise ConfigError(f"config key 'params.config.{key}' must be a positive integer")


def with_num_envs(cfg: RLConfig, num_envs: int) -> RLConfig:
    """A copy of ``cfg`` for ``num_envs`` envs, its minibatch rescaled to keep the minibatches per mini-epoch.

    The file's ``minibatch_size`` was chosen for its own ``env.num_envs``; scaling it with the env count keeps
    the optimisation schedule (gradient steps per epoch) of the file.
    """
    if num_envs < 1:
        raise UserError(f"--num-envs must be positive, got {num_envs}")
    cfg = copy.deepcopy(cfg)
    config = cfg.params["config"]
    horizon = config["horizon_length"]
    minibatches = max(1, cfg.env.num_envs * horizon // config["minibatch_size"])
    if num_envs * horizon % minibatches != 0:
        raise ConfigError(f"{num_envs} envs x horizon {horizon} cannot be split into the config's {minibatches} "
                          f"minibatches; pick --num-envs so that num_envs * {horizon} is a multiple of {minibatches}")
    config["minibatch_size"] = num_envs * horizon // minibatches
    cfg.env.num_envs = num_envs
    return cfg


def resolve_params(cfg: RLConfig, device: str, seed: int, logdir: str | Path | None = None,
                   max_epochs: int | None = None) -> dict[str, Any]:
    """The rl-games params of one run: a copy of ``cfg.params`` with the run-dependent keys filled in.

    Sets the env name and count, device, seed and run directory (``train_dir``/``full_experiment_name``, so
    that rl-games writes ``<logdir>/nn`` and ``<logdir>/summaries``). With rl-games' own multi-GPU switch
    (``params.config.multi_gpu``, under torchrun; rl-games then averages gradients over nccl), rank r's envs
    live on ``cuda:<LOCAL_RANK>`` and are seeded with ``seed + r`` (rl-games offsets its own seed the same way).
    """
    params = copy.deepcopy(cfg.params)
    config = params["config"]
    env_seed = seed
    if config.get("multi_gpu"):
        if not device.startswith("cuda"):
            raise UserError("params.config.multi_gpu (rl-games' multi-GPU PPO, nccl only) needs --device cuda")
        rank = rank_from_env()
        device, env_seed = device_for_rank(device, rank), seed + rank.rank
    if cfg.env.num_envs * config["horizon_length"] % config["minibatch_size"] != 0:
        raise ConfigError(f"params.config.minibatch_size {config['minibatch_size']} does not divide "
                          f"env.num_envs x horizon_length = {cfg.env.num_envs * config['horizon_length']}")
    config["num_actors"] = cfg.env.num_envs
    config["env_name"] = RL_GAMES_ENV_NAME
    # Plain types only, so the resolved config can be written as YAML; the env creator validates it again.
    config["env_config"] = {"env": to_dict(cfg.env), "device": device, "seed": env_seed}
    config["device"] = device
    config["device_name"] = device
    config.setdefault("name", f"{cfg.env.robot}_{cfg.env.task}")
    if max_epochs is not None:
        config["max_epochs"] = max_epochs
    if logdir is not None:
        logdir = Path(logdir).resolve()
        config["train_dir"] = str(logdir.parent)
        config["full_experiment_name"] = logdir.name
    params["seed"] = seed
    # rl-games otherwise sets torch's thread count to min(4, cores) itself, overriding OMP_NUM_THREADS.
    params.setdefault("torch_threads", 0)
    return params
