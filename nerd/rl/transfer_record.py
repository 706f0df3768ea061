"""The transfer loop's record, ``loop.json`` in the loop directory: what each finished stage produced, what a resume
may change (:class:`LoopRecord`), and the loop's cost in PPO env-steps and ground-truth transitions
(:func:`loop_cost`).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

from nerd.config import differences
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.rl.transfer_config import EXTENSION_KEYS
from nerd.run_dir import write_text_atomic

STATE_FILE = "loop.json"
"""The loop's record of its finished stages, in the loop directory."""
ADDED_KEYS = {("ppo_simulator",): NEURAL, ("refine", "policy_weight"): 1.0, ("stages",): [],
              ("evaluation", "select_rounds"): 1, ("evaluation", "select_games"): 256,
              ("evaluation", "select_seed"): 600}
"""Config keys added after loops were recorded, with the value those loops ran with (a resume compares configs; a
key of a section is added where the loop has that section)."""


class LoopRecord:
    """``loop.json``: the outputs of the finished stages, written atomically after each one.

    Opening the record of a loop that exists checks the resolved ``config`` against the one it recorded (only the
    evaluation settings, the round count and, when rounds are added, the extension settings may differ) and
    applies the resume: more rounds keep the earlier final evaluation, fewer end an unfinished loop sooner.
    """

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
            elif _selection_settings(old) != _selection_settings(config) and "final" in self.data:
                # The final policy is chosen again; its evaluation stays if the choice is the same policy.
                self.data["final"].pop("selection", None)
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


SELECTION_KEYS = ("select_rounds", "select_games", "select_seed")
"""The evaluation settings of the final policy's choice (:class:`~nerd.rl.transfer_config.LoopEvalConfig`)."""


def _evaluation_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What an evaluation's numbers depend on: the evaluation section without ``every_round`` and the choice of the
    final policy."""
    return {k: v for k, v in (config.get("evaluation") or {}).items()
            if k != "every_round" and k not in SELECTION_KEYS}


def _selection_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What the choice of the final policy depends on."""
    return {k: v for k, v in (config.get("evaluation") or {}).items() if k in SELECTION_KEYS}


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
    the :data:`~nerd.rl.transfer_config.EXTENSION_KEYS`."""
    fixed = copy.deepcopy({k: v for k, v in config.items() if k not in ("evaluation", "rounds")})
    if extending:
        for *path, last in EXTENSION_KEYS:
            section = _get(fixed, tuple(path))
            if isinstance(section, dict):
                section.pop(last, None)
    return fixed


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
