"""The transfer loop's config (:class:`TransferConfig`, one YAML file per task in ``cfg/transfer/``): the RL task,
the NeRD model(s) to start from, the rounds, the refinement between them (ours) and the stages of a recipe, each
checked before anything runs (:func:`check_transfer_config`). The loop itself: :mod:`nerd.rl.transfer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nerd.checkpoint import load_checkpoint
from nerd.config import ConfigError, apply_overrides, check_range, from_dict, load_config, to_dict
from nerd.datasets.windows import dataset_files
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH
from nerd.rl.config import RLConfig, load_rl_config, with_num_envs
from nerd.training import TrainConfig, check_init_from

EXTENSION_KEYS = (("epochs_per_round",), ("refine", "stochastic"), ("refine", "finetune_minutes"),
                  ("refine", "base_train"), ("refine", "base_valid"), ("refine", "policy_weight"), ("stages",))
"""Settings a resume that adds rounds may change: they act only on the stages it runs (each round records the
epoch its PPO ended at, the value its data was collected with, its fine-tune's minutes and base data), never on a
stage the loop has run. E.g. fewer epochs per round with shorter fine-tunes refine the model more often at the same
ground-truth share; no base data fine-tunes on the policy data alone."""


@dataclass
class RefineConfig:
    """Ground-truth data where the policy goes, and the NeRD fine-tune on it (our option)."""

    train_cfg: str
    """NeRD training config of the fine-tunes (its ``model`` section must be the models'); its datasets are
    replaced by ``base_train``/``base_valid`` plus the policy data."""
    gt_fraction: float = 0.1
    """Ground-truth transitions collected per round, as a fraction of the round's PPO env-steps in NeRD (the
    shipped configs use 0.1, the budget docs/transfer.md holds the loop to)."""
    base_train: list[str] = field(default_factory=list)
    """The models' own training data, mixed into every fine-tune so that they do not forget it (empty: the policy
    data alone). Its trajectories must not be longer than ``trajectory_length``."""
    base_valid: list[str] = field(default_factory=list)
    """Validation data beside the policy data's held-out part."""
    policy_weight: float = 1.0
    """Loss weight of every policy data file against a base data file's (``dataset.train_weights``; our option).
    The policy's settled states move by millimetres, so in an unweighted mix the base data's error sets the
    gradient and the policy data is hardly learnt; a larger weight makes it count without dropping the base data.
    1: the unweighted mix."""
    valid_fraction: float = 0.1
    """Share of each round's ground-truth transitions written to a validation file instead of the training one."""
    finetune_minutes: float = 5.0
    """CPU time of each model's fine-tune per round (``time_budget_minutes``). A resume that adds rounds may
    change it for the fine-tunes it runs."""
    train_overrides: list[str] = field(default_factory=list)
    """``key=value`` overrides of ``train_cfg`` for the fine-tunes, e.g. ``lr_start=3e-4``."""
    checkpoint: Literal["best", "last"] = "best"
    """Which checkpoint of a fine-tune the next round steps with (``best`` by the training config's
    ``best_checkpoint_by``)."""
    trajectory_length: int = 100
    """Frames per trajectory of the policy data."""
    stochastic: bool = True
    """Roll the policy out with its exploration noise (as PPO explores), or with its mean action (what the
    evaluation plays: the states where the policy settles). A resume that adds rounds may switch it."""

    def __post_init__(self) -> None:
        check_range("gt_fraction", self.gt_fraction, low=0, low_open=True, high=1)
        check_range("valid_fraction", self.valid_fraction, low=0, high=0.5)
        check_range("finetune_minutes", self.finetune_minutes, low=0, low_open=True)
        check_range("policy_weight", self.policy_weight, low=0, low_open=True)
        check_range("trajectory_length", self.trajectory_length, low=1)

    def data_parts(self, env_steps: int) -> dict[str, int]:
        """Ground-truth transitions to collect after a PPO round of ``env_steps``, per part (``train``, ``valid``):
        ``gt_fraction`` of them, ``valid_fraction`` of that held out. The collector writes whole trajectories, so a
        part too small for one of ``trajectory_length`` frames gets one where the budget also holds the training
        part's, and none otherwise (the base validation data then stand alone): the round never simulates more than
        its budget. A budget without a whole training trajectory, or without validation data of any kind, is a
        :class:`ConfigError`."""
        total = math.floor(self.gt_fraction * env_steps)
        length = self.trajectory_length
        valid = math.ceil(self.valid_fraction * total)
        if 0 < valid < length:
            valid = length if total >= 2 * length else 0
        if total - valid < length:
            raise ConfigError(f"config key 'refine.gt_fraction': {self.gt_fraction:g} of a round's {env_steps} PPO "
                              f"env-steps is {total} ground-truth transitions, less than one trajectory of "
                              f"refine.trajectory_length {length} for the fine-tunes' training data; raise "
                              "gt_fraction or epochs_per_round, or shorten trajectory_length")
        if valid == 0 and not self.base_valid:
            raise ConfigError(f"config key 'refine.gt_fraction': {self.gt_fraction:g} of a round's {env_steps} PPO "
                              f"env-steps is {total} ground-truth transitions, too few for a training and a "
                              f"validation trajectory of refine.trajectory_length {length}; give "
                              "refine.base_valid, raise gt_fraction or shorten trajectory_length")
        return {"train": total - valid, "valid": valid}


@dataclass
class LoopEvalConfig:
    """The evaluation of the loop's policies in both simulators (the paper's Table-1 protocol)."""

    num_games: int = 2048
    """Episodes per simulator."""
    num_envs: int = 2048
    """Parallel envs."""
    seed: int = 500
    """Seed of the initial states (the same in both simulators)."""
    every_round: bool = False
    """Also evaluate every round's policy (each in the models it was trained in), not just the last."""
    select_rounds: int = 1
    """The final policy is the best, by its reward in the final NeRD model(s), of the last ``select_rounds``
    rounds' policies (ours; 1: the last round's, the faithful choice). The choice uses NeRD alone: it guards against
    a last PPO round that lost reward in its own simulator."""
    select_games: int = 256
    """Episodes each candidate plays in NeRD for the choice."""
    select_seed: int = 600
    """Seed of the choice's initial states (other ones than the evaluation's, which then also judges the choice)."""

    def __post_init__(self) -> None:
        check_range("num_games", self.num_games, low=1)
        check_range("num_envs", self.num_envs, low=1)
        check_range("select_rounds", self.select_rounds, low=1)
        check_range("select_games", self.select_games, low=1)


STAGE_KEYS = tuple(".".join(key) for key in EXTENSION_KEYS if key != ("stages",))
"""The settings a stage may change: those that act only on the rounds and refinements that use them."""


@dataclass
class StageConfig:
    """Settings that change from one round on, so that a recipe of several stages is one config (our option)."""

    from_round: int
    """The first PPO round the settings apply to; the refinement before it (of the models that round trains in)
    uses them too."""
    overrides: list[str] = field(default_factory=list)
    """``key=value`` settings of :data:`STAGE_KEYS`, e.g. ``epochs_per_round=10`` or ``refine.base_train=[]``."""

    def __post_init__(self) -> None:
        check_range("from_round", self.from_round, low=1)
        for item in self.overrides:
            key = item.split("=", 1)[0]
            if "=" not in item or key not in STAGE_KEYS:
                raise ConfigError(f"config key 'overrides': a stage sets {', '.join(STAGE_KEYS)} as key=value, "
                                  f"got '{item}'")


@dataclass
class TransferConfig:
    """One task's transfer loop. Relative paths are relative to the working directory of the command."""

    rl_cfg: str
    """RL config: task, simulator settings and the PPO settings (``cfg/rl/...``)."""
    nerd_model_path: str | list[str]
    """The NeRD model the first round trains in, or several (an ensemble: each is fine-tuned on the same data)."""
    rounds: int = 1
    """PPO rounds; with ``refine``, the models are refined between two rounds."""
    epochs_per_round: int = 100
    """PPO epochs per round. A resume that adds rounds may change it for the rounds it runs."""
    num_envs: int | None = None
    """PPO envs (the minibatch is rescaled, as ``run_rl.py --num-envs``); None keeps the RL config's."""
    rl_overrides: list[str] = field(default_factory=list)
    """``key=value`` overrides of the RL config, e.g. ``env.disagreement_penalty=1.0``."""
    refine: RefineConfig | None = None
    """Refine the models with the policy's ground-truth data (ours); None: the faithful recipe."""
    ppo_simulator: Literal["neural", "ground-truth"] = "neural"
    """Where PPO trains. ``ground-truth`` is the loop's control: the same PPO settings, rounds and env-steps in the
    analytical simulator (no ``refine``); its final policy is still evaluated in both simulators."""
    evaluation: LoopEvalConfig = field(default_factory=LoopEvalConfig)
    """Evaluation in both simulators."""
    stages: list[StageConfig] = field(default_factory=list)
    """Later stages of the recipe, in the order of their ``from_round``: each changes the settings it names from
    its round on (the settings above are the first stage's). E.g. 4 rounds of 50 epochs, then rounds of 10 epochs
    whose fine-tunes use the policy data alone."""

    def __post_init__(self) -> None:
        check_range("rounds", self.rounds, low=1)
        check_range("epochs_per_round", self.epochs_per_round, low=1)
        check_range("num_envs", self.num_envs, low=1)
        if not self.nerd_model_path:
            raise ConfigError("config key 'nerd_model_path': name the NeRD model(s) the loop starts from")
        if self.evaluation.select_rounds > self.rounds:
            raise ConfigError(f"config key 'evaluation.select_rounds': the final policy is chosen among the last "
                              f"rounds' policies, at most rounds={self.rounds}, got {self.evaluation.select_rounds}")
        if self.ppo_simulator == GROUND_TRUTH and self.refine is not None:
            raise ConfigError("config key 'refine': a loop whose PPO trains in the ground truth has no model to "
                              "refine; drop 'refine' or set ppo_simulator: neural")
        for k, stage in enumerate(self.stages):
            if k and stage.from_round <= self.stages[k - 1].from_round:
                raise ConfigError(f"config key 'stages[{k}].from_round': the stages must start at increasing "
                                  f"rounds, got {stage.from_round} after {self.stages[k - 1].from_round}")
            if self.refine is None and any(item.startswith("refine.") for item in stage.overrides):
                raise ConfigError(f"config key 'stages[{k}].overrides': a loop without 'refine' has no refine "
                                  "settings to change")
            self.for_round(stage.from_round)  # every stage's settings validate now, not after hours of PPO

    @property
    def model_paths(self) -> list[str]:
        """The starting model(s) as a list."""
        return [self.nerd_model_path] if isinstance(self.nerd_model_path, str) else list(self.nerd_model_path)

    def for_round(self, k: int) -> TransferConfig:
        """The settings PPO round ``k`` runs with (and the refinement of the models it trains in): the config with
        the overrides of every stage that starts at round ``k`` or before."""
        overrides = [item for stage in self.stages if stage.from_round <= k for item in stage.overrides]
        if not overrides:
            return self
        data = apply_overrides({**to_dict(self), "stages": []}, overrides)
        where = ", ".join(f"stages[{i}]" for i, stage in enumerate(self.stages) if stage.from_round <= k)
        try:
            return from_dict(TransferConfig, data)
        except ConfigError as err:
            raise ConfigError(f"{err} (set by {where})") from None


def load_transfer_config(path: str | Path, overrides: list[str] | None = None) -> TransferConfig:
    """Read and validate a transfer-loop config (``key.sub=value`` overrides applied first)."""
    return load_config(path, TransferConfig, overrides)


def loop_rl_config(cfg: TransferConfig) -> RLConfig:
    rl_cfg = load_rl_config(cfg.rl_cfg, cfg.rl_overrides)
    if cfg.num_envs is not None:
        rl_cfg = with_num_envs(rl_cfg, cfg.num_envs)
    rl_cfg.env.env_mode = cfg.ppo_simulator
    return rl_cfg


def ppo_env_steps(cfg: TransferConfig, rl_cfg: RLConfig) -> int:
    """Env-steps of one PPO round of ``cfg`` (one of :meth:`TransferConfig.for_round`'s configs)."""
    return cfg.epochs_per_round * rl_cfg.env.num_envs * rl_cfg.params["config"]["horizon_length"]


def check_transfer_config(cfg: TransferConfig) -> tuple[RLConfig, TrainConfig | None]:
    """Check every input of the loop before anything runs; returns the RL config and the fine-tunes' config."""
    rl_cfg = loop_rl_config(cfg)
    # A missing model, a model of another robot or a file that is no checkpoint fails here, not when PPO starts.
    loaded = {}
    for path in cfg.model_paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"NeRD model not found: {path}")
        model, sig, _ = load_checkpoint(path)
        if sig.env_name != rl_cfg.env.robot:
            raise UserError(f"nerd_model_path {path} is a model of {sig.env_name}, but the task is "
                            f"{rl_cfg.env.robot}'s")
        loaded[path] = (model.cfg, sig)
    train_cfg = None
    if cfg.refine is not None:
        train_cfg = load_config(cfg.refine.train_cfg, TrainConfig, cfg.refine.train_overrides)
        if train_cfg.env_name != rl_cfg.env.robot:
            raise UserError(f"refine.train_cfg trains {train_cfg.env_name}, but the task is {rl_cfg.env.robot}'s")
        # The settings of round 0 and of each stage (the rounds of one stage are alike).
        for round_cfg in [cfg] + [cfg.for_round(stage.from_round) for stage in cfg.stages]:
            refine = round_cfg.refine
            for path in refine.base_train + refine.base_valid:
                if not Path(path).exists():
                    raise FileNotFoundError(f"dataset not found: {path} (refine.base_train / refine.base_valid)")
                dataset_files(path)  # a folder without parts fails here, not at a fine-tune after hours of PPO
            if not refine.base_valid and refine.valid_fraction == 0:
                raise ConfigError("config key 'refine.valid_fraction': the fine-tunes need validation data; give "
                                  "refine.base_valid or a positive valid_fraction")
            refine.data_parts(ppo_env_steps(round_cfg, rl_cfg))  # the budget holds whole trajectories
        for path in cfg.model_paths:
            check_init_from(train_cfg, path, loaded[path])  # the first fine-tune runs after hours of PPO
    return rl_cfg, train_cfg
