"""The transfer loop: PPO in NeRD, refined with the policy's own ground-truth data, evaluated in both simulators.

One YAML file (:class:`~nerd.rl.transfer_config.TransferConfig`, ``cfg/transfer/``) describes the whole loop of one
task. Each round

1. trains PPO in the current NeRD model(s) for ``epochs_per_round`` epochs, continuing the previous round's policy
   (weights, normalisation, optimiser and epoch count: :func:`~nerd.rl.train.train_policy`'s ``init_from``);
2. with ``refine`` (ours), rolls that policy out in the ground truth, with its exploration noise, for at most
   ``refine.gt_fraction`` of the round's PPO env-steps (:mod:`nerd.rl.policy_data`);
3. fine-tunes every NeRD model on its own data plus all the policy data gathered so far (``--init-from``), and the
   next round's PPO steps in the fine-tuned models. The models' one-step error on the fresh data is recorded
   before and after (and an ensemble's disagreement against it, :mod:`nerd.calibration`).

``stages`` change some of these settings from a given round on (:class:`~nerd.rl.transfer_config.StageConfig`), so
that a recipe of several stages is one config.

Without ``refine`` the loop is the faithful recipe: the same PPO, in the same model from the first to the last
epoch. With ``ppo_simulator: ground-truth`` it is the control: the same PPO rounds in the analytical simulator.
After the last round the final policy is evaluated in both simulators (:mod:`nerd.rl.batch_eval`; optionally
after every round, for the ground-truth reward against compute, and then the last round's table is the final one).
The final policy is the last round's, or with ``evaluation.select_rounds`` (ours) the best of the last rounds'
policies by their reward in the final NeRD model(s): a choice made in NeRD alone.

The loop directory holds ``config.yaml`` (the loop as run), ``loop.json`` (what each finished stage produced,
:mod:`nerd.rl.transfer_record`; the loop resumes from it after an interruption: a finished stage is never run again,
an interrupted NeRD fine-tune continues from its ``nn/last.pt``, an interrupted PPO round from its last full-state
checkpoint (written every :data:`~nerd.rl.train.RESUME_EVERY_EPOCHS` epochs), an interrupted data collection starts
over; a resume with more ``rounds`` extends a finished loop, and may change the settings of the stages it runs),
``round_<k>/ppo/`` (the rl-games run), ``round_<k>/data/{train,valid}.hdf5``, ``round_<k>/model_<m>/`` (the NeRD
fine-tunes), ``round_<k>/eval.{json,md,png}`` and ``eval.{json,md,png}`` (the final table, with the loop's
ground-truth cost, and the reward at each step of an episode in both simulators).
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml

from nerd.calibration import ensemble_calibration
from nerd.config import to_dict
from nerd.datasets.windows import dataset_files
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.rl.batch_eval import PolicyEvalConfig, batch_evaluate, format_markdown, write_table
from nerd.rl.config import RLConfig
from nerd.rl.policy_data import collect_policy_data
from nerd.rl.train import interrupted_run_state, train_policy
from nerd.rl.transfer_config import (
    RefineConfig,
    TransferConfig,
    check_transfer_config,
    load_transfer_config,
    ppo_env_steps,
)
from nerd.rl.transfer_record import STATE_FILE, LoopRecord, format_cost, loop_cost
from nerd.run_dir import ExclusiveLock, new_run_dir, write_run_record
from nerd.training import TrainConfig, train

__all__ = ["TransferConfig", "load_transfer_config", "run_transfer_loop"]

LOOP_DIR_ENTRIES = (STATE_FILE, "config.yaml", "git.yaml", "eval.json", "eval.md", "eval.png")
"""The loop's own files in its directory (beside its ``round_<k>`` folders)."""


def run_transfer_loop(cfg: TransferConfig, logdir: str | Path, device: str = "cpu", seed: int = 0,
                      resume: bool = False, overwrite: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the loop of ``cfg`` in ``logdir``; returns the final evaluation table with the loop's cost.

    Args:
        resume: Continue the loop in ``logdir`` where it stopped; it must have been started with the same config
            and seed, except for the evaluation settings and for ``rounds``. Fewer rounds, down to the last round
            it has started (the one after it once its ground-truth data is collected), end an unfinished loop
            sooner. More rounds continue a finished loop: its last policy is refined after and trained further; the
            earlier final evaluation is kept as ``eval_rounds<R>.{json,md,png}`` and in ``loop.json``'s
            ``earlier_finals``. A resume that adds rounds may also change the
            :data:`~nerd.rl.transfer_config.EXTENSION_KEYS` (recorded in ``loop.json``'s ``extensions``).
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
    state = LoopRecord(logdir, resolved)
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
            refine = cfg.for_round(k + 1).refine  # the settings of the models round k + 1 trains in
            data = _collect(refine, rl_cfg, policy, k, round_dir, record, state, device, seed, progress)
            if "model_error" not in record:
                # The models' one-step error (and an ensemble's disagreement against it) on the policy's fresh
                # ground-truth data, which they have not been trained on.
                record["model_error"] = ensemble_calibration(models, data["train"], device=device)
                state.save()
            models = _refine(refine, train_cfg, models, data, k, round_dir, record, state, device, seed, progress)
            if "valid" in data and "refined_model_error_valid" not in record:
                # Before and after the fine-tune, on the round's held-out part (neither model trained on it).
                record["model_error_valid"] = ensemble_calibration(record["nerd_models"], data["valid"],
                                                                   device=device)
                record["refined_model_error_valid"] = ensemble_calibration(models, data["valid"], device=device)
                state.save()
    final = state.data.setdefault("final", {})
    chosen = _select_policy(cfg, state, models, device, progress)
    if final.get("policy") not in (None, chosen):
        # Another choice than the one evaluated (its settings changed on a resume).
        for key in ("eval", "policy", "nerd_models"):
            final.pop(key, None)
    if "eval" not in final:
        last_eval = logdir / f"round_{cfg.rounds - 1}" / "eval.json"
        if chosen == policy and "eval" in state.round(cfg.rounds - 1) and last_eval.is_file():
            # Every round was evaluated: the last round's table is the final policy in the final models.
            table = json.loads(last_eval.read_text())
        else:
            table = _evaluate(cfg, [chosen], models, device, progress)
        table["loop"] = loop_cost(state.data)
        if "selection" in final:
            table["selection"] = final["selection"]
        write_table(table, logdir / "eval.json")
        final.update(eval=_table_cells(table), policy=chosen, nerd_models=models)
        state.save()
    else:
        table = json.loads((logdir / "eval.json").read_text())
    if progress:
        print(format_markdown(table), flush=True)
        print(format_cost(table["loop"]), flush=True)
    return table


def _ppo_round(cfg: TransferConfig, rl_cfg: RLConfig, models: list[str], previous: str | None, k: int,
               round_dir: Path, record: dict[str, Any], state: LoopRecord, device: str, seed: int, progress: bool
               ) -> str:
    if "policy" in record:
        return record["policy"]
    run_cfg = copy.deepcopy(rl_cfg)
    run_cfg.env.nerd_model_path = models[0] if len(models) == 1 else list(models)
    round_cfg = cfg.for_round(k)
    epochs = state.end_epoch(k - 1) + round_cfg.epochs_per_round
    if progress:
        where = f"NeRD ({', '.join(models)})" if cfg.ppo_simulator == NEURAL else "the ground truth"
        print(f"round {k}: PPO in {where} up to epoch {epochs}", flush=True)
    resume = interrupted_run_state(round_dir / "ppo", epochs)[0] is not None
    summary = train_policy(run_cfg, round_dir / "ppo", device, seed, max_epochs=epochs, progress=progress,
                           overwrite=True, init_from=None if resume else previous, resume=resume)
    if resume:
        # ppo_seconds then counts only the epochs after this one.
        record["ppo_resumed_from_epoch"] = summary["resumed_from_epoch"]
    record.update(policy=summary["last_checkpoint"], ppo_epoch_end=epochs, nerd_models=list(models),
                  ppo_simulator=cfg.ppo_simulator,
                  ppo_env_steps=ppo_env_steps(round_cfg, run_cfg),
                  ppo_seconds=summary["train_seconds"],
                  train_reward=summary["epochs"][-1]["mean_episode_reward"] if summary["epochs"] else None)
    state.save()
    return record["policy"]


def _collect(refine: RefineConfig, rl_cfg: RLConfig, policy: str, k: int, round_dir: Path, record: dict[str, Any],
             state: LoopRecord, device: str, seed: int, progress: bool) -> dict[str, str]:
    if "data" in record:
        return record["data"]
    parts = refine.data_parts(record["ppo_env_steps"])
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


def _refine(refine: RefineConfig, train_cfg: TrainConfig, models: list[str], data: dict[str, str], k: int,
            round_dir: Path, record: dict[str, Any], state: LoopRecord, device: str, seed: int, progress: bool
            ) -> list[str]:
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


def _select_policy(cfg: TransferConfig, state: LoopRecord, models: list[str], device: str, progress: bool) -> str:
    """The final policy: the last round's, or with ``evaluation.select_rounds`` > 1 the one of the last rounds'
    policies with the highest mean reward in the final models (recorded in ``loop.json``'s ``final.selection``).
    Every candidate plays from the same initial states, with the last round's RL config (the loop's task)."""
    ev = cfg.evaluation
    last = state.round(cfg.rounds - 1)["policy"]
    if ev.select_rounds == 1:
        return last
    final = state.data["final"]
    if "selection" not in final:
        rounds = list(range(cfg.rounds - ev.select_rounds, cfg.rounds))
        candidates = [state.round(k)["policy"] for k in rounds]
        if progress:
            print(f"choosing the final policy among rounds {rounds[0]}-{rounds[-1]} in NeRD "
                  f"({ev.select_games} episodes each)", flush=True)
        table = batch_evaluate(PolicyEvalConfig(rl_cfg=str(Path(last).parent.parent / "config.yaml"),
                                                checkpoints=candidates, simulators=[NEURAL],
                                                nerd_model_path=models[0] if len(models) == 1 else list(models),
                                                num_games=ev.select_games, num_envs=min(ev.select_games, ev.num_envs),
                                                seed=ev.select_seed), device, progress)
        rewards = [row[NEURAL]["mean"] for row in table["rows"][:len(candidates)]]
        # The later round wins a tie: it has trained longest.
        best = max(range(len(rounds)), key=lambda i: (rewards[i], i))
        scored = zip(rounds, candidates, rewards, strict=True)
        final["selection"] = {"candidates": [{"round": k, "policy": p, "neural_reward": r} for k, p, r in scored],
                              "round": rounds[best], "policy": candidates[best]}
        state.save()
    if progress:
        selection = final["selection"]
        print(f"final policy: round {selection['round']}'s ("
              + ", ".join(f"round {c['round']}: {c['neural_reward']:.1f}" for c in selection["candidates"])
              + " in NeRD)", flush=True)
    return final["selection"]["policy"]


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
