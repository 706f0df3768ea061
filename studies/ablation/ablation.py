r"""The paper's ablation study (appendix "Ablation Study"): every variant of NeRD trained on the same data at the
same CPU budget, scored on the paper's two test cases, each normalised by NeRD's own result.

1. ``pendulum``: passive double pendulum (``PendulumWithContact``, one fixed contact-free ground configuration),
   rollouts from random initial states with zero torques; metric = mean joint-angle error (the mean of the
   robot's joint-angle metrics), divided by NeRD's.
2. ``ant``: the Ant run policies play whole episodes in each variant's model and in the ground truth; metric =
   mean over policies of |reward in the variant − reward in the ground truth|, divided by the same for NeRD.

A variant is a list of training-config overrides (``model.prediction=absolute``, ``model.type=gru``, ...) of
the case's base config, listed in the spec YAML (``studies/ablation/ablation.yaml``), with the paper's ratios
beside them. Every variant trains under ``time_budget_minutes`` of CPU time (one torch thread by default) with
the same seed. The study resumes: a finished training run (``summary.yaml`` written) is not trained again, an
interrupted one continues from its ``nn/last.pt``, and finished evaluations (``ablation_eval.json`` beside the
run, ``ant/ground_truth.json``) are not rerun. At the end ``ablation.json``, ``ablation.md`` and ``ablation.png``
(a bar per variant and test case, our ratio beside the paper's) are written in ``--logdir``.

Example, from the repository root (the second command: the same study at a quarter of the budget):
    OMP_NUM_THREADS=1 python studies/ablation/ablation.py --spec studies/ablation/ablation.yaml --logdir runs/ablation
    OMP_NUM_THREADS=1 python studies/ablation/ablation.py --spec studies/ablation/ablation.yaml \
        --logdir runs/ablation_5min --cfg-overrides budget_minutes=5
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from nerd.checkpoint import read_checkpoint
from nerd.cli import run_main
from nerd.config import ConfigError, check_range, from_dict, load_config, to_dict
from nerd.errors import UserError
from nerd.run_dir import ExclusiveLock, write_text_atomic
from nerd.training import RUN_CHECKPOINT, TrainConfig, train

CASES = ("pendulum", "ant")
"""The paper's two test cases, in the order of its figure."""
EVAL_FILE = "ablation_eval.json"
"""A variant's finished evaluation, written in its run directory."""


@dataclass
class CaseData:
    """The data every variant of one case trains on (relative paths: from the working directory)."""

    train: str
    """Training HDF5 file or folder of parts."""
    valid: str
    """Validation HDF5 file or folder."""


@dataclass
class PendulumCase:
    """Test case 1: passive motion of the double pendulum against the ground truth."""

    base_cfg: str
    """Training config every variant starts from."""
    data: CaseData
    """Training and validation data."""
    env_name: str = "PendulumWithContact"
    """The robot."""
    overrides: list[str] = field(default_factory=list)
    """Training-config overrides of this case, for every variant."""
    contact_config: int | None = 0
    """Fixed ground configuration of the evaluation (0: the paper's contact-free passive motion)."""
    initial_states: str = "task"
    """Where the rollouts start: ``task`` (the robot's random reset) or ``data`` (the data sampler's)."""
    rollouts: int = 2048
    """Rollouts per variant."""
    num_envs: int = 2048
    """Rollouts stepped at once."""
    horizon: int = 100
    """Steps per rollout."""
    seed: int = 500
    """Seed of the initial states (the same for every variant)."""
    metrics: list[str] = field(default_factory=lambda: ["base_orientation_error", "joint_position_error"])
    """The joint-angle metrics averaged into the case's error (the pendulum's two joints)."""

    def __post_init__(self) -> None:
        for key in ("rollouts", "num_envs", "horizon"):
            check_range(key, getattr(self, key), 1)
        if not self.metrics:
            raise ConfigError("config key 'metrics': name at least one metric")


@dataclass
class AntPolicy:
    """A policy trained in NeRD and the RL config it was trained with."""

    rl_cfg: str
    """RL config (task, network)."""
    checkpoint: str
    """rl-games checkpoint."""


@dataclass
class AntCase:
    """Test case 2: Ant run policies' reward in each variant's model against the ground truth."""

    base_cfg: str
    """Training config every variant starts from."""
    data: CaseData
    """Training and validation data."""
    policies: list[AntPolicy]
    """The policies evaluated."""
    env_name: str = "Ant"
    """The robot."""
    overrides: list[str] = field(default_factory=list)
    """Training-config overrides of this case, for every variant."""
    num_games: int = 2048
    """Episodes per policy and simulator."""
    num_envs: int = 2048
    """Parallel envs."""
    seed: int = 500
    """Seed of the episodes' initial states (the same everywhere)."""
    episode_length: int | None = None
    """Steps before a time-out; None keeps the RL config's (set it small for quick checks)."""

    def __post_init__(self) -> None:
        for key in ("num_games", "num_envs", "episode_length"):
            check_range(key, getattr(self, key), 1)
        if not self.policies:
            raise ConfigError("config key 'policies': name at least one policy")


@dataclass
class AblationSpec:
    """The whole study: budget, cases, variants and the paper's numbers."""

    budget_minutes: float
    """CPU minutes of training per variant and case (``time_budget_minutes``)."""
    variants: dict[str, list[str]]
    """Variant name -> training-config overrides; the reference variant is NeRD itself (usually no overrides)."""
    pendulum: PendulumCase | None = None
    """Test case 1 (None: left out)."""
    ant: AntCase | None = None
    """Test case 2 (None: left out)."""
    reference: str = "nerd"
    """The variant every ratio is normalised by."""
    seed: int = 0
    """Training seed of every variant (weights and batch orders)."""
    threads: int = 1
    """Torch threads while training and evaluating."""
    overrides: list[str] = field(default_factory=list)
    """Training-config overrides for every case and variant (e.g. ``num_epochs=1000`` so that the budget ends runs)."""
    paper: dict[str, list[float | None]] = field(default_factory=dict)
    """Variant -> the paper's ratios [pendulum, ant] (None where the paper gives none)."""

    def __post_init__(self) -> None:
        check_range("budget_minutes", self.budget_minutes, 0, low_open=True)
        check_range("threads", self.threads, 1)
        unknown = [name for name in self.paper if name not in self.variants]
        if unknown:
            raise ConfigError(f"config key 'paper': {', '.join(unknown)} is not among the variants")
        if self.reference not in self.variants:
            raise ConfigError(f"config key 'reference': '{self.reference}' is not among the variants")
        if self.pendulum is None and self.ant is None:
            raise ConfigError("config keys 'pendulum' and 'ant': the spec names neither test case")
        for name, ratios in self.paper.items():
            if len(ratios) != len(CASES):
                raise ConfigError(f"config key 'paper.{name}': expected [pendulum, ant], got {ratios!r}")

    def case(self, name: str) -> PendulumCase | AntCase | None:
        """The case called ``name`` (one of :data:`CASES`), or None if the spec leaves it out."""
        return self.pendulum if name == "pendulum" else self.ant


def say(message: str) -> None:
    """A progress line of the study (flushed: the study runs for hours)."""
    print(f"[ablation {time.strftime('%H:%M:%S')}] {message}", flush=True)


def variant_config(spec: AblationSpec, case: PendulumCase | AntCase, variant: str) -> TrainConfig:
    """The training config of ``variant`` in ``case``: the case's base config, the study's budget and data, the
    study's, the case's and the variant's overrides (later ones win)."""
    overrides = [f"dataset.train={case.data.train}", f"dataset.valid={case.data.valid}",
                 f"time_budget_minutes={spec.budget_minutes}", *spec.overrides, *case.overrides,
                 *spec.variants[variant]]
    cfg = load_config(case.base_cfg, TrainConfig, overrides)
    if cfg.env_name != case.env_name:
        raise ConfigError(f"{case.base_cfg} trains {cfg.env_name}, but the case evaluates {case.env_name}")
    return cfg


def _checkpoint(run: Path) -> Path:
    """The checkpoint a finished run is evaluated with: ``best.pt``, or ``last.pt`` where no epoch's rollout check
    stayed finite."""
    best = run / "nn" / "best.pt"
    return best if best.is_file() else run / RUN_CHECKPOINT


# The parts of a run's config that make it the variant it is at the study's budget (a run trained for another
# budget is another result: its schedule and its training differ).
_IDENTITY_KEYS = ("env_name", "model", "history_length", "dataset", "time_budget_minutes")


def _other_training(spec: AblationSpec, cfg: TrainConfig, run: Path) -> str | None:
    """Why the run in ``run`` is not the spec's variant with the training config ``cfg`` (None if it is, or if it
    has recorded nothing yet): another setting of :data:`_IDENTITY_KEYS`, or another seed."""
    recorded = run / "config.yaml"
    if not recorded.is_file():
        return None
    old = _recorded_config(yaml.safe_load(recorded.read_text()) or {})
    new = to_dict(cfg)
    changed = [k for k in _IDENTITY_KEYS if old.get(k) != yaml.safe_load(yaml.safe_dump(new.get(k)))]
    if changed:
        return f"another {', '.join(changed)}"
    if (run / RUN_CHECKPOINT).is_file():
        seed = (read_checkpoint(run / RUN_CHECKPOINT).get("extra") or {}).get("seed")
        if seed is not None and seed != spec.seed:
            return f"another seed ({seed}; the spec's: {spec.seed})"
    return None


def _recorded_config(raw: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded config with the defaults of keys added since it was written, so that a run recorded
    before a new option existed reads as the option's default (NeRD's) instead of as another variant."""
    try:
        return to_dict(from_dict(TrainConfig, raw))
    except ConfigError:
        return raw  # a record this version cannot read: compared as written, so a difference refuses it


def train_variant(spec: AblationSpec, case_name: str, variant: str, run: Path, device: str, progress: bool) -> Path:
    """Train one variant of one case into ``run`` unless it is finished; returns the checkpoint to evaluate.

    Raises:
        UserError: If ``run`` holds a run of another configuration (the spec changed): the study would mix them.
    """
    case = spec.case(case_name)
    cfg = variant_config(spec, case, variant)
    reason = _other_training(spec, cfg, run)
    if reason is not None:
        raise UserError(f"{run} holds a {case_name}/{variant} run with {reason} than the spec asks for; delete that "
                        "folder or use another --logdir")
    if (run / "summary.yaml").is_file():
        say(f"{case_name}/{variant}: trained ({run / 'summary.yaml'}), not trained again")
        return _checkpoint(run)
    (run / EVAL_FILE).unlink(missing_ok=True)  # an evaluation of an unfinished run is stale
    resume = (run / RUN_CHECKPOINT).is_file()
    say(f"{case_name}/{variant}: {'resuming' if resume else 'training'} for {spec.budget_minutes:g} CPU-minutes "
        f"({' '.join(spec.variants[variant]) or 'NeRD as configured'})")
    torch.set_num_threads(spec.threads)
    train(cfg, run, device=device, seed=None if resume else spec.seed, resume=resume, overwrite=not resume,
          progress=progress)
    return _checkpoint(run)


def evaluate_pendulum(case: PendulumCase, checkpoint: Path, device: str, progress: bool) -> dict[str, Any]:
    """Test case 1 for one model: the mean joint-angle error of its passive rollouts against the ground truth."""
    from nerd.evaluation import evaluate_passive
    from nerd.modes import NEURAL

    results = evaluate_passive(case.env_name, str(checkpoint), NEURAL, case.num_envs, case.rollouts, case.horizon,
                               case.seed, contact_config=case.contact_config, device=device, progress=progress,
                               initial_states=case.initial_states)
    missing = [m for m in case.metrics if m not in results["metrics"]]
    if missing:
        raise UserError(f"{case.env_name} reports no metric {missing[0]} (it has {', '.join(results['metrics'])})")
    error = sum(results["metrics"][m] for m in case.metrics) / len(case.metrics)
    return {"error": error, "metrics": results["metrics"], "num_rollouts": results["num_rollouts"],
            "horizon": case.horizon, "checkpoint": str(checkpoint)}


def _policy_rewards(case: AntCase, simulator: str, checkpoint: Path | None, device: str, progress: bool
                    ) -> list[dict[str, Any]]:
    """Each policy's mean episode reward (and divergences) in ``simulator``, with ``checkpoint`` as NeRD."""
    from nerd.rl.batch_eval import PolicyEvalConfig, batch_evaluate

    rewards = []
    for policy in case.policies:
        cfg = PolicyEvalConfig(rl_cfg=policy.rl_cfg, checkpoints=[policy.checkpoint], simulators=[simulator],
                               nerd_model_path=None if checkpoint is None else str(checkpoint),
                               num_games=case.num_games, num_envs=case.num_envs, seed=case.seed,
                               episode_length=case.episode_length)
        row = batch_evaluate(cfg, device, progress)["rows"][0][simulator]
        rewards.append({"policy": policy.checkpoint, "mean_reward": row["mean"], "std_reward": row["std"],
                        "num_games": row["num_games"], "num_diverged": row.get("num_diverged", 0)})
    return rewards


def ground_truth_rewards(case: AntCase, logdir: Path, device: str, progress: bool) -> list[dict[str, Any]]:
    """The policies' rewards in the ground truth, evaluated once for every variant (``ant/ground_truth.json``)."""
    from nerd.modes import GROUND_TRUTH

    path = logdir / "ant" / "ground_truth.json"
    settings = {"policies": [to_dict(p) for p in case.policies], "num_games": case.num_games, "seed": case.seed,
                "episode_length": case.episode_length}

    def stored() -> list[dict[str, Any]] | None:
        record = json.loads(path.read_text()) if path.is_file() else {}
        return record["rewards"] if record.get("settings") == settings else None

    if (rewards := stored()) is not None:
        say(f"ant/ground truth: evaluated ({path}), not rerun")
        return rewards
    lock = _work_lock(path.parent, "ground_truth", "ant/ground truth")
    try:
        if (rewards := stored()) is not None:  # finished by another process while this one waited for the lock
            return rewards
        say(f"ant/ground truth: {len(case.policies)} policies x {case.num_games} episodes")
        rewards = _policy_rewards(case, GROUND_TRUTH, None, device, progress)
        write_text_atomic(path, json.dumps({"settings": settings, "rewards": rewards}, indent=2))
    finally:
        lock.release()
    return rewards


def evaluate_ant(case: AntCase, checkpoint: Path, ground_truth: list[dict[str, Any]], device: str, progress: bool
                 ) -> dict[str, Any]:
    """Test case 2 for one model: the mean over policies of |reward in the model − reward in the ground truth|."""
    from nerd.modes import NEURAL

    rewards = _policy_rewards(case, NEURAL, checkpoint, device, progress)
    gaps = [abs(r["mean_reward"] - g["mean_reward"]) for r, g in zip(rewards, ground_truth, strict=True)]
    return {"error": sum(gaps) / len(gaps), "reward_gaps": gaps, "rewards": rewards, "ground_truth": ground_truth,
            "checkpoint": str(checkpoint)}


def eval_settings(case: PendulumCase | AntCase) -> dict[str, Any]:
    """What a case's evaluation depends on besides the model (recorded in each ``ablation_eval.json``)."""
    if isinstance(case, PendulumCase):
        keys = ("env_name", "contact_config", "initial_states", "rollouts", "num_envs", "horizon", "seed", "metrics")
    else:
        keys = ("env_name", "policies", "num_games", "num_envs", "seed", "episode_length")
    settings = to_dict(case)
    return {key: yaml.safe_load(yaml.safe_dump(settings[key])) for key in keys}


def _stale_reason(case: PendulumCase | AntCase, stored: dict[str, Any],
                  ground_truth: list[dict[str, Any]] | None) -> str | None:
    """Why a stored evaluation is not one of the spec's (None if it is). Files written before the settings were
    recorded are compared on what they hold: the rollouts and horizon, or the Ant's episodes and ground truth."""
    if "settings" in stored:
        changed = [key for key, value in eval_settings(case).items() if stored["settings"].get(key) != value]
        if changed:
            return f"other {', '.join(changed)}"
    elif isinstance(case, PendulumCase):
        if (stored.get("num_rollouts"), stored.get("horizon")) != (case.rollouts, case.horizon):
            return "other rollouts or horizon"
    elif any(r.get("num_games") != case.num_games for r in stored.get("rewards", [])):
        return "other num_games"
    if ground_truth is not None and stored.get("ground_truth") != ground_truth:
        return "another ground-truth evaluation"
    return None


def _work_lock(folder: Path, name: str, what: str) -> ExclusiveLock:
    """The lock a process holds while it trains or evaluates ``what`` (``<folder>/.<name>.study.lock``): processes
    with their own ``--only`` variants share a study's directory, and two on the same work would race."""
    folder.mkdir(parents=True, exist_ok=True)
    return ExclusiveLock(folder / f".{name}.study.lock",
                         f"another process is training or evaluating {what} in {folder}; give each process its own "
                         "variants (--only), after the reference, and gather the table once they have finished")


def _stored_evaluation(case: PendulumCase | AntCase, path: Path, ground_truth: list[dict[str, Any]] | None
                       ) -> tuple[dict[str, Any] | None, str | None]:
    """The evaluation stored in ``path`` if it is one of the spec's, else None and why it is stale (None if there is
    no evaluation)."""
    if not path.is_file():
        return None, None
    stored = json.loads(path.read_text())
    reason = _stale_reason(case, stored, ground_truth)
    return (stored, None) if reason is None else (None, reason)


def run_case(spec: AblationSpec, case_name: str, variants: list[str], logdir: Path, device: str, progress: bool
             ) -> dict[str, dict[str, Any]]:
    """Train and evaluate ``variants`` in one case (each step skipped where it is done); their evaluations.

    A variant with work left is locked while this process works on it; a variant another process is working on is
    refused (:class:`UserError`), a finished one is read without the lock.
    """
    case = spec.case(case_name)
    results = {}
    ground_truth = None
    for index, variant in enumerate(variants):
        run = logdir / case_name / variant
        path = run / EVAL_FILE
        say(f"[{index + 1}/{len(variants)}] {case_name}/{variant}")
        lock = None if (run / "summary.yaml").is_file() else _work_lock(run.parent, variant, f"{case_name}/{variant}")
        try:
            checkpoint = train_variant(spec, case_name, variant, run, device, progress)
            if case_name == "ant":
                ground_truth = ground_truth or ground_truth_rewards(case, logdir, device, progress)
            stored, stale = _stored_evaluation(case, path, ground_truth)
            if stored is None and lock is None:
                lock = _work_lock(run.parent, variant, f"{case_name}/{variant}")
                # Another process may have finished the evaluation before this one took the lock.
                stored, stale = _stored_evaluation(case, path, ground_truth)
            if stored is not None:
                say(f"{case_name}/{variant}: evaluated ({path}), not rerun")
                results[variant] = stored
                continue
            if stale is not None:
                say(f"{case_name}/{variant}: evaluated with {stale} than the spec's; evaluating again")
            torch.set_num_threads(spec.threads)
            if case_name == "pendulum":
                say(f"{case_name}/{variant}: {case.rollouts} rollouts x {case.horizon} steps")
                result = evaluate_pendulum(case, checkpoint, device, progress)
            else:
                say(f"{case_name}/{variant}: {len(case.policies)} policies x {case.num_games} episodes")
                result = evaluate_ant(case, checkpoint, ground_truth, device, progress)
            result["overrides"] = spec.variants[variant]
            result["settings"] = eval_settings(case)
            write_text_atomic(path, json.dumps(result, indent=2))
            say(f"{case_name}/{variant}: error {result['error']:.5g}")
            results[variant] = result
        finally:
            if lock is not None:
                lock.release()
    return results


def ratios(spec: AblationSpec, results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    """Case -> variant -> its error divided by the reference's (None where either is missing or the reference's
    error is zero)."""
    table: dict[str, dict[str, float | None]] = {}
    for case_name, by_variant in results.items():
        reference = by_variant.get(spec.reference, {}).get("error")
        table[case_name] = {
            variant: (None if not reference or variant not in by_variant else by_variant[variant]["error"] / reference)
            for variant in spec.variants}
    return table


def format_markdown(spec: AblationSpec, table: dict[str, dict[str, float | None]]) -> str:
    """Our ratios beside the paper's, one row per variant."""
    def cell(value: float | None) -> str:
        return "–" if value is None or not math.isfinite(value) else f"{value:.2f}"

    lines = [f"Errors relative to {spec.reference} (1 = as good; lower is better); {spec.budget_minutes:g} "
             f"CPU-minutes of training per variant, seed {spec.seed}.", "",
             "| variant | overrides | pendulum (ours) | pendulum (paper) | Ant (ours) | Ant (paper) |",
             "|---|---|---|---|---|---|"]
    for variant, overrides in spec.variants.items():
        paper = spec.paper.get(variant, [None, None])
        lines.append(f"| {variant} | {'<br>'.join(overrides) or '(NeRD)'} | "
                     f"{cell(table.get('pendulum', {}).get(variant))} | {cell(paper[0])} | "
                     f"{cell(table.get('ant', {}).get(variant))} | {cell(paper[1])} |")
    return "\n".join(lines) + "\n"


def plot(spec: AblationSpec, table: dict[str, dict[str, float | None]], path: Path) -> None:
    """The paper's figure: one panel per test case, a pair of bars per variant (ours, the paper's), log scale, with
    the reference's 1 drawn across."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(spec.variants)
    fig, axes = plt.subplots(1, len(CASES), figsize=(max(6.0, 0.7 * len(variants)) * len(CASES) / 1.6, 4.2),
                             squeeze=False)
    for ax, (index, case_name) in zip(axes[0], enumerate(CASES), strict=True):
        ours = [table.get(case_name, {}).get(v) for v in variants]
        paper = [spec.paper.get(v, [None, None])[index] for v in variants]
        x = range(len(variants))
        for offset, values, label, color in ((-0.2, ours, "ours", "tab:blue"), (0.2, paper, "paper", "tab:gray")):
            shown = [(i + offset, v) for i, v in zip(x, values, strict=True) if v is not None and v > 0]
            if shown:
                ax.bar(*zip(*shown, strict=True), width=0.4, label=label, color=color)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks(list(x), variants, rotation=45, ha="right", fontsize=8)
        ax.set_title("double pendulum, passive: joint-angle error" if case_name == "pendulum"
                     else "Ant run policies: |reward − GT reward|", fontsize=9)
        ax.set_ylabel(f"relative to {spec.reference}")
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)


def run_study(spec: AblationSpec, logdir: str | Path, variants: list[str] | None = None,
              cases: list[str] | None = None, device: str = "cpu", progress: bool = True) -> dict[str, Any]:
    """Train, evaluate and tabulate the study (each step skipped where it is done); returns what ``ablation.json``
    holds: the settings, every evaluation and the ratios. The reference variant always runs first."""
    logdir = Path(logdir)
    names = variants or list(spec.variants)
    unknown = [n for n in names if n not in spec.variants]
    if unknown:
        raise ConfigError(f"unknown variant(s) {', '.join(unknown)}; the spec has {', '.join(spec.variants)}")
    names = [spec.reference] + [n for n in names if n != spec.reference]
    chosen = [c for c in (cases or CASES) if spec.case(c) is not None]
    if not chosen:
        raise UserError(f"none of the cases {cases} is in the spec")
    for case_name in chosen:
        for variant in names:
            variant_config(spec, spec.case(case_name), variant)  # a mistake fails now, not after hours of training
    results = {case_name: run_case(spec, case_name, names, logdir, device, progress) for case_name in chosen}
    # Evaluations of other variants or cases finished earlier (another --only) belong in the table too, when they
    # are of this spec: the same training (config, budget, seed) and the same evaluation settings.
    for case_name in CASES:
        case = spec.case(case_name)
        if case is None:
            continue
        truth = logdir / "ant" / "ground_truth.json"
        ground_truth = json.loads(truth.read_text())["rewards"] if case_name == "ant" and truth.is_file() else None
        for variant in spec.variants:
            path = logdir / case_name / variant / EVAL_FILE
            if not path.is_file() or variant in results.get(case_name, {}):
                continue
            stored = json.loads(path.read_text())
            reason = _stale_reason(case, stored, ground_truth) or _other_training(
                spec, variant_config(spec, case, variant), path.parent)
            if reason is None:
                results.setdefault(case_name, {})[variant] = stored
            else:
                say(f"{case_name}/{variant}: left out of the table ({reason} than the spec's)")
    table = ratios(spec, results)
    record = {"spec": to_dict(spec), "ratios": table, "results": results}
    logdir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(logdir / "ablation.json", json.dumps(record, indent=2))
    write_text_atomic(logdir / "ablation.md", format_markdown(spec, table))
    plot(spec, table, logdir / "ablation.png")
    say(f"wrote {logdir / 'ablation.json'}, {logdir / 'ablation.md'} and {logdir / 'ablation.png'}")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="study spec YAML (studies/ablation/ablation.yaml)")
    parser.add_argument("--logdir", default="runs/ablation", help="where runs and results go (default: runs/ablation)")
    parser.add_argument("--only", nargs="+", default=None, help="variants to run (default: all; NeRD always runs)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=None, help="test cases (default: both)")
    parser.add_argument("--cfg-overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="spec overrides, e.g. budget_minutes=5 (with its own --logdir: a second budget)")
    parser.add_argument("--device", default="cpu", help="torch/Warp device (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (the progress lines stay)")
    args = parser.parse_args(argv)
    spec = load_config(args.spec, AblationSpec, args.cfg_overrides)
    record = run_study(spec, args.logdir, args.only, args.cases, args.device, not args.no_progress)
    print(format_markdown(spec, record["ratios"]), flush=True)


if __name__ == "__main__":
    run_main(main)
