"""The transfer loop: PPO in NeRD, refined with the policy's own ground-truth data, evaluated in both simulators.

One YAML file (:class:`TransferConfig`, ``cfg/transfer/``) describes the whole loop of one task. Each round

1. trains PPO in the current NeRD model(s) for ``epochs_per_round`` epochs, continuing the previous round's policy
   (weights, normalisation, optimiser and epoch count: :func:`~nerd.rl.train.train_policy`'s ``init_from``);
2. with ``refine`` (ours), rolls that policy out in the ground truth, with its exploration noise, for at most
   ``refine.gt_fraction`` of the round's PPO env-steps (:mod:`nerd.rl.policy_data`);
3. fine-tunes every NeRD model on its own data plus all the policy data gathered so far (``--init-from``), and the
   next round's PPO steps in the fine-tuned models. The models' one-step error on the fresh data is recorded
   before and after (and an ensemble's disagreement against it, :mod:`nerd.calibration`).

``stages`` change some of these settings from a given round on (:class:`StageConfig`), so that a recipe of several
stages is one config.

Without ``refine`` the loop is the faithful recipe: the same PPO, in the same model from the first to the last
epoch. With ``ppo_simulator: ground-truth`` it is the control: the same PPO rounds in the analytical simulator.
After the last round the final policy is evaluated in both simulators (:mod:`nerd.rl.batch_eval`; optionally
after every round, for the ground-truth reward against compute, and then the last round's table is the final one).

The loop directory holds ``config.yaml`` (the loop as run), ``loop.json`` (what each finished stage produced; the
loop resumes from it after an interruption: a finished stage is never run again, an interrupted NeRD fine-tune
continues from its ``nn/last.pt``, an interrupted PPO round from its last full-state checkpoint (written every
:data:`~nerd.rl.train.RESUME_EVERY_EPOCHS` epochs), an interrupted data collection starts over; a resume with more
``rounds`` extends a finished loop, and may switch ``refine.stochastic`` for the collections it runs),
``round_<k>/ppo/``
(the rl-games run), ``round_<k>/data/{train,valid}.hdf5``, ``round_<k>/model_<m>/`` (the NeRD fine-tunes),
``round_<k>/eval.{json,md,png}`` and ``eval.{json,md,png}`` (the final table, with the loop's ground-truth cost, and
the reward at each step of an episode in both simulators).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from nerd.calibration import ensemble_calibration
from nerd.checkpoint import load_checkpoint
from nerd.config import ConfigError, apply_overrides, check_range, differences, from_dict, load_config, to_dict
from nerd.datasets.windows import dataset_files
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.rl.batch_eval import PolicyEvalConfig, batch_evaluate, format_markdown, write_table
from nerd.rl.config import RLConfig, load_rl_config, with_num_envs
from nerd.rl.policy_data import collect_policy_data
from nerd.rl.train import interrupted_run_state, train_policy
from nerd.run_dir import ExclusiveLock, new_run_dir, write_run_record, write_text_atomic
from nerd.training import TrainConfig, check_init_from, train

STATE_FILE = "loop.json"
"""The loop's record of its finished stages, in the loop directory."""
LOOP_DIR_ENTRIES = (STATE_FILE, "config.yaml", "git.yaml", "eval.json", "eval.md", "eval.png")
"""The loop's own files in its directory (beside its ``round_<k>`` folders)."""
ADDED_KEYS = {("ppo_simulator",): NEURAL, ("refine", "policy_weight"): 1.0, ("stages",): []}
"""Config keys added after loops were recorded, with the value those loops ran with (a resume compares configs; a
key of a section is added where the loop has that section)."""
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

    def __post_init__(self) -> None:
        check_range("num_games", self.num_games, low=1)
        check_range("num_envs", self.num_envs, low=1)


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


def _rl_config(cfg: TransferConfig) -> RLConfig:
    rl_cfg = load_rl_config(cfg.rl_cfg, cfg.rl_overrides)
    if cfg.num_envs is not None:
        rl_cfg = with_num_envs(rl_cfg, cfg.num_envs)
    rl_cfg.env.env_mode = cfg.ppo_simulator
    return rl_cfg


def check_transfer_config(cfg: TransferConfig) -> tuple[RLConfig, TrainConfig | None]:
    """Check every input of the loop before anything runs; returns the RL config and the fine-tunes' config."""
    rl_cfg = _rl_config(cfg)
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
        for refine in [cfg.refine] + [cfg.for_round(stage.from_round).refine for stage in cfg.stages]:
            for path in refine.base_train + refine.base_valid:
                if not Path(path).exists():
                    raise FileNotFoundError(f"dataset not found: {path} (refine.base_train / refine.base_valid)")
                dataset_files(path)  # a folder without parts fails here, not at a fine-tune after hours of PPO
            if not refine.base_valid and refine.valid_fraction == 0:
                raise ConfigError("config key 'refine.valid_fraction': the fine-tunes need validation data; give "
                                  "refine.base_valid or a positive valid_fraction")
        for path in cfg.model_paths:
            check_init_from(train_cfg, path, loaded[path])  # the first fine-tune runs after hours of PPO
    return rl_cfg, train_cfg


class _LoopState:
    """``loop.json``: the outputs of the finished stages, written atomically after each one."""

    def __init__(self, logdir: Path, config: dict[str, Any]):
        self.path = logdir / STATE_FILE
        self.resized_from: int | None = None
        """The loop's earlier round count when this resume adds rounds or ends it sooner (None otherwise)."""
        self.config_changed = False
        """Whether this resume runs with other settings than the loop recorded (its config.yaml is rewritten)."""
        if self.path.is_file():
            self.data = _read_state(self.path)
            recorded = self.data.get("logdir") or _recorded_logdir(self.data)
            if recorded is not None and recorded != str(logdir):
                # A copied or moved loop: its records name the files of the directory it ran in.
                self.data = {key: value if key == "config" else _relocated(value, recorded, str(logdir))
                             for key, value in self.data.items()}
            self._record_epochs_of_old_rounds()
            # The evaluation settings may change on a resume (e.g. to evaluate every round of a finished loop
            # afterwards), and rounds may be added; neither changes a stage the loop has run.
            old = _with_added_keys(self.data["config"])
            extending = config["rounds"] > old["rounds"]
            mismatched = differences(_fixed_settings(old, extending), _fixed_settings(config, extending))
            if mismatched:
                raise UserError(f"{logdir} holds a transfer loop of another config ({'; '.join(mismatched)}); "
                                "resume it with the --cfg, --cfg-overrides and --seed it ran with (its config.yaml "
                                "records them) or choose another --logdir")
            changed = {".".join(key): [_get(old, key), _get(config, key)] for key in EXTENSION_KEYS
                       if _get(old, key) != _get(config, key)}
            if extending and changed and "final" not in self.data:
                # An interrupted stage (a PPO round, a fine-tune) would continue with settings it did not start
                # with, or be thrown away: an unfinished loop first finishes (or ends sooner), then extends.
                raise UserError(f"{logdir} holds a loop that has not finished; it resumes with its own "
                                f"{', '.join(changed)} (finish it, or end it sooner with fewer rounds, then "
                                "extend it with new settings)")
            if _evaluation_settings(old) != _evaluation_settings(config):
                # Every evaluation the loop made was of the old settings: made again with the new ones.
                self.data.pop("final", None)
                for record in self.data["rounds"]:
                    record.pop("eval", None)
            self.config_changed = _with_added_keys(config) != old
            if config["rounds"] < old["rounds"]:
                # A loop still running may end sooner (and be extended again later): every stage it has run
                # stays a stage of the shorter loop.
                fewest = self._fewest_rounds()
                if config["rounds"] < fewest:
                    raise UserError(f"{logdir} holds a loop of {old['rounds']} rounds that has run {fewest} of them "
                                    f"(with the one its collected ground-truth data is for); a resume may end it "
                                    f"sooner, not remove rounds it has run (rounds >= {fewest})")
                del self.data["rounds"][config["rounds"]:]
                self.resized_from = old["rounds"]
                # An interrupted collection after the new last round: it will not be finished or used.
                shutil.rmtree(logdir / f"round_{config['rounds'] - 1}" / "data", ignore_errors=True)
            if extending:
                self.resized_from = old["rounds"]
                if changed:
                    self.data.setdefault("extensions", []).append({"rounds": old["rounds"], "changed": changed})
                if "final" in self.data:
                    # The old last round's policy is no longer the final one; its evaluation is kept beside.
                    self.data.setdefault("earlier_finals", []).append({"rounds": old["rounds"],
                                                                       **self.data.pop("final")})
            self.data["config"] = config
        else:
            self.data = {"config": config, "rounds": []}
        self.data["logdir"] = str(logdir)

    def _fewest_rounds(self) -> int:
        """The fewest rounds this loop can still have: its last started round, or the round after it once the
        ground-truth data for that round's refinement has been collected."""
        started = [k for k, record in enumerate(self.data["rounds"]) if record]
        if not started:
            return 1
        last = started[-1]
        return last + (2 if "data" in self.data["rounds"][last] else 1)

    def _record_epochs_of_old_rounds(self) -> None:
        """Loops recorded before rounds kept their last PPO epoch ran a fixed ``epochs_per_round``: fill it in, so
        that an extension that changes it continues from the right epoch."""
        per_round = self.data["config"]["epochs_per_round"]
        for k, record in enumerate(self.data["rounds"]):
            if "policy" in record:
                record.setdefault("ppo_epoch_end", (k + 1) * per_round)

    def end_epoch(self, k: int) -> int:
        """The PPO epoch round ``k`` ended at (0 before the first round)."""
        return 0 if k < 0 else self.data["rounds"][k]["ppo_epoch_end"]

    def round(self, k: int) -> dict[str, Any]:
        while len(self.data["rounds"]) <= k:
            self.data["rounds"].append({})
        return self.data["rounds"][k]

    def save(self) -> None:
        write_text_atomic(self.path, json.dumps(self.data, indent=2))


def _read_state(path: Path) -> dict[str, Any]:
    """A loop's ``loop.json``, checked for the parts a resume reads."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("config"), dict) \
                or not isinstance(data.get("rounds"), list) or not all(isinstance(r, dict) for r in data["rounds"]):
            raise ValueError("not a transfer loop's record: no config and rounds")
        if not isinstance(data["config"].get("rounds"), int):
            raise ValueError("its config has no round count")
    except (OSError, ValueError) as err:  # json's decode error is a ValueError
        raise UserError(f"{path} is damaged ({err}); the loop cannot resume from it (restore it, or start again "
                        "with --overwrite)") from None
    return data


def _recorded_logdir(data: dict[str, Any]) -> str | None:
    """The directory a loop recorded before it stored its ``logdir`` ran in, from its first policy's path."""
    policy = next((r["policy"] for r in data["rounds"] if isinstance(r.get("policy"), str)), None)
    marker = "/round_0/ppo/"
    return policy.split(marker)[0] if policy and marker in policy else None


def _relocated(value: Any, old: str, new: str) -> Any:
    """``value`` with every path in the directory ``old`` (a string equal to it or below it) moved to ``new``."""
    if isinstance(value, dict):
        return {k: _relocated(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocated(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old):]
    return value


def _evaluation_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What an evaluation's numbers depend on: the evaluation section without ``every_round``."""
    return {k: v for k, v in (config.get("evaluation") or {}).items() if k != "every_round"}


def _with_added_keys(config: dict[str, Any]) -> dict[str, Any]:
    """A recorded config with the :data:`ADDED_KEYS` it lacks, at the values loops ran with before they existed."""
    config = copy.deepcopy(config)
    for (*path, last), value in ADDED_KEYS.items():
        section = _get(config, tuple(path)) if path else config
        if isinstance(section, dict):
            section.setdefault(last, value)
    return config


def _get(config: dict[str, Any], key: tuple[str, ...]) -> Any:
    for part in key:
        config = (config or {}).get(part)
    return config


def _fixed_settings(config: dict[str, Any], extending: bool = False) -> dict[str, Any]:
    """What a resume must keep: everything but the evaluation and the number of rounds, and when it adds rounds,
    the :data:`EXTENSION_KEYS`."""
    fixed = copy.deepcopy({k: v for k, v in config.items() if k not in ("evaluation", "rounds")})
    if extending:
        for *path, last in EXTENSION_KEYS:
            section = _get(fixed, tuple(path))
            if isinstance(section, dict):
                section.pop(last, None)
    return fixed


def run_transfer_loop(cfg: TransferConfig, logdir: str | Path, device: str = "cpu", seed: int = 0,
                      resume: bool = False, overwrite: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the loop of ``cfg`` in ``logdir``; returns the final evaluation table with the loop's cost.

    Args:
        resume: Continue the loop in ``logdir`` where it stopped; it must have been started with the same config
            and seed, except for the evaluation settings and for ``rounds``. Fewer rounds, down to the last round
            it has started (the one after it once its ground-truth data is collected), end an unfinished loop
            sooner. More rounds continue a finished loop: its last policy is refined after and trained further; the
            earlier final evaluation is kept as ``eval_rounds<R>.{json,md,png}`` and in ``loop.json``'s
            ``earlier_finals``. A resume that adds rounds may also change the :data:`EXTENSION_KEYS` (recorded in
            ``loop.json``'s ``extensions``).
        overwrite: Remove a previous loop's outputs in ``logdir`` first (only once every input has been checked).

    A ``logdir`` that holds a loop is refused without one of the two; only one process may run a loop directory at
    a time.
    """
    if resume and overwrite:
        raise UserError("--resume continues the loop in --logdir, --overwrite replaces it: pick one")
    rl_cfg, train_cfg = check_transfer_config(cfg)
    logdir = Path(logdir)
    if resume and not (logdir / STATE_FILE).is_file():
        raise UserError(f"nothing to resume: {logdir} holds no transfer loop ({STATE_FILE})")
    created = not logdir.exists()
    logdir.mkdir(parents=True, exist_ok=True)
    lock = ExclusiveLock(logdir / "loop.lock", f"another process is running the transfer loop in {logdir}")
    failed_start = False
    try:
        if resume:
            start = contextlib.nullcontext()
        else:
            if (logdir / STATE_FILE).is_file() and not overwrite:
                raise UserError(f"{logdir} holds a transfer loop; --resume continues it, --overwrite replaces it")
            found = [name for name in LOOP_DIR_ENTRIES if (logdir / name).exists()]
            if found and not overwrite:
                raise UserError(f"{logdir} holds another run's files ({', '.join(found)}); choose another "
                                "--logdir or pass --overwrite")
            entries = sorted({*LOOP_DIR_ENTRIES, "round_0", *(p.name for p in logdir.glob("round_*")),
                              *(p.name for p in logdir.glob("eval_rounds*"))})
            # A previous loop is set aside until the new one has written round 0's first PPO checkpoint, and put
            # back if the new one fails before (a failed start leaves nothing of its own).
            start = new_run_dir(logdir, entries, overwrite=True, checkpoints="round_0/ppo/nn/*.pth")
        with start:
            return _run_loop(cfg, rl_cfg, train_cfg, logdir, device, seed, resume, progress)
    except BaseException:
        failed_start = created and {p.name for p in logdir.iterdir()} <= {"loop.lock"}
        raise
    finally:
        lock.release()
        if failed_start:
            shutil.rmtree(logdir, ignore_errors=True)


def _run_loop(cfg: TransferConfig, rl_cfg: RLConfig, train_cfg: TrainConfig | None, logdir: Path, device: str,
              seed: int, resume: bool, progress: bool) -> dict[str, Any]:
    """The loop's stages in ``logdir``, which holds this process's lock (see :func:`run_transfer_loop`)."""
    resolved = {**to_dict(cfg), "seed": seed}
    state = _LoopState(logdir, resolved)
    if state.resized_from is not None:
        # A finished loop's final evaluation, kept beside (a loop ended sooner is unfinished: it has none).
        for suffix in ("json", "md", "png"):
            earlier = logdir / f"eval.{suffix}"
            if earlier.is_file():
                earlier.replace(logdir / f"eval_rounds{state.resized_from}.{suffix}")
    # Written before the first stage, so that a loop killed in its first round can be resumed.
    state.save()
    if not resume or state.resized_from is not None or state.config_changed:
        write_run_record(logdir, resolved)
    models = cfg.model_paths
    policy: str | None = None
    for k in range(cfg.rounds):
        record = state.round(k)
        round_dir = logdir / f"round_{k}"
        policy = _ppo_round(cfg, rl_cfg, models, policy, k, round_dir, record, state, device, seed, progress)
        if cfg.evaluation.every_round and "eval" not in record:
            table = _evaluate(cfg, [policy], models, device, progress)
            write_table(table, round_dir / "eval.json")
            record["eval"] = _table_cells(table)
            state.save()
        if cfg.refine is not None and k < cfg.rounds - 1:
            data = _collect(cfg, rl_cfg, policy, k, round_dir, record, state, device, seed, progress)
            if "model_error" not in record:
                # The models' one-step error (and an ensemble's disagreement against it) on the policy's fresh
                # ground-truth data, which they have not been trained on.
                record["model_error"] = ensemble_calibration(models, data["train"], device=device)
                state.save()
            models = _refine(cfg, train_cfg, models, data, k, round_dir, record, state, device, seed, progress)
            if "valid" in data and "refined_model_error_valid" not in record:
                # Before and after the fine-tune, on the round's held-out part (neither model trained on it).
                record["model_error_valid"] = ensemble_calibration(record["nerd_models"], data["valid"],
                                                                   device=device)
                record["refined_model_error_valid"] = ensemble_calibration(models, data["valid"], device=device)
                state.save()
    final = state.data.setdefault("final", {})
    if "eval" not in final:
        last_eval = logdir / f"round_{cfg.rounds - 1}" / "eval.json"
        if "eval" in state.round(cfg.rounds - 1) and last_eval.is_file():
            # Every round was evaluated: the last round's table is the final policy in the final models.
            table = json.loads(last_eval.read_text())
        else:
            table = _evaluate(cfg, [policy], models, device, progress)
        table["loop"] = loop_cost(state.data)
        write_table(table, logdir / "eval.json")
        final.update(eval=_table_cells(table), policy=policy, nerd_models=models)
        state.save()
    else:
        table = json.loads((logdir / "eval.json").read_text())
    if progress:
        print(format_markdown(table), flush=True)
        print(format_cost(table["loop"]), flush=True)
    return table


def _ppo_round(cfg: TransferConfig, rl_cfg: RLConfig, models: list[str], previous: str | None, k: int,
               round_dir: Path, record: dict[str, Any], state: _LoopState, device: str, seed: int, progress: bool
               ) -> str:
    if "policy" in record:
        return record["policy"]
    run_cfg = copy.deepcopy(rl_cfg)
    run_cfg.env.nerd_model_path = models[0] if len(models) == 1 else list(models)
    per_round = cfg.for_round(k).epochs_per_round
    epochs = state.end_epoch(k - 1) + per_round
    if progress:
        where = f"NeRD ({', '.join(models)})" if cfg.ppo_simulator == NEURAL else "the ground truth"
        print(f"round {k}: PPO in {where} up to epoch {epochs}", flush=True)
    resume = interrupted_run_state(round_dir / "ppo", epochs)[0] is not None
    summary = train_policy(run_cfg, round_dir / "ppo", device, seed, max_epochs=epochs, progress=progress,
                           overwrite=True, init_from=None if resume else previous, resume=resume)
    config = run_cfg.params["config"]
    if resume:
        # ppo_seconds then counts only the epochs after this one.
        record["ppo_resumed_from_epoch"] = summary["resumed_from_epoch"]
    record.update(policy=summary["last_checkpoint"], ppo_epoch_end=epochs, nerd_models=list(models),
                  ppo_simulator=cfg.ppo_simulator,
                  ppo_env_steps=per_round * run_cfg.env.num_envs * config["horizon_length"],
                  ppo_seconds=summary["train_seconds"],
                  train_reward=summary["epochs"][-1]["mean_episode_reward"] if summary["epochs"] else None)
    state.save()
    return record["policy"]


def _collect(cfg: TransferConfig, rl_cfg: RLConfig, policy: str, k: int, round_dir: Path, record: dict[str, Any],
             state: _LoopState, device: str, seed: int, progress: bool) -> dict[str, str]:
    refine = cfg.for_round(k + 1).refine  # the data of the models round k + 1 trains in
    if "data" in record:
        return record["data"]
    total = math.ceil(refine.gt_fraction * record["ppo_env_steps"])
    parts = {"valid": math.ceil(refine.valid_fraction * total)}
    parts["train"] = total - parts["valid"]
    data, cost = {}, {}
    for offset, (name, transitions) in enumerate(sorted(parts.items())):
        if transitions == 0:
            continue
        path = round_dir / "data" / f"{name}.hdf5"
        path.unlink(missing_ok=True)  # a file of an interrupted collection that the state does not record
        if progress:
            print(f"round {k}: {transitions} ground-truth transitions of the policy ({name})", flush=True)
        # In the ground truth of the task's settings (collect_policy_data switches the mode).
        summary = collect_policy_data(rl_cfg, policy, path, transitions, refine.trajectory_length,
                                      stochastic=refine.stochastic, device=device,
                                      seed=seed * 1000 + 2 * k + offset, progress=progress)
        data[name] = str(path)
        cost[name] = asdict(summary)
    record.update(data=data, gt=cost, stochastic=refine.stochastic,
                  gt_transitions=sum(part["simulated_transitions"] for part in cost.values()))
    state.save()
    return data


def _refine(cfg: TransferConfig, train_cfg: TrainConfig, models: list[str], data: dict[str, str], k: int,
            round_dir: Path, record: dict[str, Any], state: _LoopState, device: str, seed: int, progress: bool
            ) -> list[str]:
    refine = cfg.for_round(k + 1).refine  # the models round k + 1 trains in
    if "refined_models" in record:
        return record["refined_models"]
    rounds = state.data["rounds"][: k + 1]
    policy_train = [r["data"]["train"] for r in rounds if "train" in r.get("data", {})]
    policy_valid = [r["data"]["valid"] for r in rounds if "valid" in r.get("data", {})]
    run_cfg = replace(train_cfg, time_budget_minutes=refine.finetune_minutes,
                      num_epochs=max(train_cfg.num_epochs, 10_000))
    weighted = refine.policy_weight != 1.0

    def weights(base: list[str], policy: list[str]) -> list[float] | None:
        return [1.0] * len(base) + [refine.policy_weight] * len(policy) if weighted else None

    run_cfg.dataset = replace(run_cfg.dataset, train=refine.base_train + policy_train,
                              valid=refine.base_valid + policy_valid, max_train_trajectories=None,
                              train_weights=weights(refine.base_train, policy_train),
                              valid_weights=weights(refine.base_valid, policy_valid))
    refined, losses = [], []
    base_files = len(dataset_files(refine.base_train)) if refine.base_train else 0
    for m, model in enumerate(models):
        run_dir = round_dir / f"model_{m}"
        if progress:
            print(f"round {k}: fine-tuning {model} for {refine.finetune_minutes:g} CPU-min on "
                  f"{base_files} base + {len(policy_train)} policy data files"
                  + (f" (policy data weighted {refine.policy_weight:g})" if weighted else ""), flush=True)
        # A fine-tune interrupted after its first epoch continues; one without a checkpoint starts over.
        resume = (run_dir / "nn" / "last.pt").is_file()
        summary = (yaml.safe_load((run_dir / "summary.yaml").read_text()) if (run_dir / "summary.yaml").is_file()
                   else train(run_cfg, run_dir, device, None if resume else seed * 100 + m, resume=resume,
                              init_from=None if resume else model, overwrite=not resume, progress=progress))
        path = run_dir / "nn" / f"{refine.checkpoint}.pt"
        if not path.is_file():
            raise UserError(f"the fine-tune in {run_dir} wrote no {path.name}; see its log")
        refined.append(str(path))
        losses.append(summary.get("best_valid_loss"))
    record.update(refined_models=refined, finetune_minutes=refine.finetune_minutes,
                  finetune_base_data=base_files, finetune_policy_weight=refine.policy_weight,
                  finetune_best_valid_loss=losses)
    state.save()
    return refined


def _evaluate(cfg: TransferConfig, policies: list[str], models: list[str], device: str, progress: bool
              ) -> dict[str, Any]:
    """Both simulators, the batch evaluation's protocol; the RL config (with the loop's overrides) is written
    beside the policy's run, so batch evaluation reads it from there."""
    run_config = Path(policies[0]).parent.parent / "config.yaml"
    ev = cfg.evaluation
    return batch_evaluate(PolicyEvalConfig(rl_cfg=str(run_config), checkpoints=policies,
                                           simulators=[GROUND_TRUTH, NEURAL],
                                           nerd_model_path=models[0] if len(models) == 1 else list(models),
                                           num_games=ev.num_games, num_envs=ev.num_envs, seed=ev.seed),
                          device, progress)


def _table_cells(table: dict[str, Any]) -> dict[str, Any]:
    row = table["rows"][-1]
    return {"ground_truth": row[GROUND_TRUTH]["mean"], "neural": row[NEURAL]["mean"],
            "relative_gap": row.get("relative_gap")}


def loop_cost(data: dict[str, Any]) -> dict[str, Any]:
    """PPO's env-steps (in NeRD, or in the ground truth for a control) and the ground-truth transitions the loop
    simulated for its models, in total and per round."""
    rounds = data["rounds"]
    ppo = sum(r.get("ppo_env_steps", 0) for r in rounds)
    gt = sum(r.get("gt_transitions", 0) for r in rounds)
    per_round = [{"round": k, "ppo_env_steps": r.get("ppo_env_steps"), "gt_transitions": r.get("gt_transitions", 0),
                  "train_reward": r.get("train_reward"), "eval": r.get("eval"),
                  "ppo_epoch_end": r.get("ppo_epoch_end"), "stochastic": r.get("stochastic"),
                  "finetune_minutes": r.get("finetune_minutes"), "finetune_base_data": r.get("finetune_base_data"),
                  "finetune_policy_weight": r.get("finetune_policy_weight"),
                  "model_error": r.get("model_error"), "model_error_valid": r.get("model_error_valid"),
                  "refined_model_error_valid": r.get("refined_model_error_valid"),
                  "finetune_best_valid_loss": r.get("finetune_best_valid_loss")} for k, r in enumerate(rounds)]
    return {"ppo_env_steps": ppo, "ppo_simulator": data["config"].get("ppo_simulator", NEURAL),
            "gt_transitions": gt, "gt_share": gt / ppo if ppo else 0.0, "rounds": per_round}


def format_cost(cost: dict[str, Any]) -> str:
    """One line: the loop's PPO env-steps and ground-truth transitions."""
    if cost.get("ppo_simulator", NEURAL) == GROUND_TRUTH:
        return f"PPO env-steps in the ground truth (the control): {cost['ppo_env_steps']:,}"
    return (f"PPO env-steps in NeRD: {cost['ppo_env_steps']:,}; ground-truth transitions: {cost['gt_transitions']:,} "
            f"({100 * cost['gt_share']:.1f} % of them)")

