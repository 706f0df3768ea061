"""PPO training with rl-games on a NeRDVecEnv.

Training builds the rl-games agent from the resolved params (:func:`nerd.rl.config.resolve_params`) and
lets it create the vec env through the rl-games registry. The run directory holds::

    <logdir>/config.yaml          the resolved config (our env section + the rl-games params)
    <logdir>/git.yaml             commit and status of the code
    <logdir>/nn/<name>.pth        rl-games' best checkpoint (by mean training reward)
    <logdir>/nn/last.pth          the final policy
    <logdir>/nn/resume.pth        the full training state after every ``checkpoint_every``-th epoch (replaced
                                  atomically; removed when the run ends): :func:`interrupted_run_state`
    <logdir>/summaries/           TensorBoard scalars written by rl-games (rewards/, losses/, performance/)
    <logdir>/train_summary.json   mean episode reward and length after every epoch
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import yaml
from rl_games.common.algo_observer import DefaultAlgoObserver

from nerd.config import to_dict
from nerd.distributed import rank_from_env
from nerd.errors import RolloutDivergedError, UserError
from nerd.rl.config import RUN_DIR_ENTRIES, RLConfig, resolve_params
from nerd.rl.policy import load_rl_games_checkpoint, rl_games_quiet
from nerd.rl.vec_env import check_env_config, register_with_rl_games
from nerd.run_dir import PREVIOUS_RUN, new_run_dir, write_run_record, write_text_atomic

RESUME_CHECKPOINT = "resume.pth"
"""The periodic full-state checkpoint in a run's ``nn/`` (``train_policy``'s ``checkpoint_every``)."""
RESUME_EVERY_EPOCHS = 10
"""How often a run writes :data:`RESUME_CHECKPOINT` by default: a kill loses at most as many epochs."""
KEPT_STATE = ".resume_from.pth"
"""An interrupted run's latest state, kept in its directory (outside the run's own entries, which a continuing
run replaces) until the continuing run ends."""
_RL_GAMES_PERIODIC = re.compile(r"^last_.+_ep_(\d+)_rew_.*\.pth$")


class ProgressObserver(DefaultAlgoObserver):
    """Records (and prints) the mean episode reward and length of the last 100 episodes after every epoch, and
    counts the episodes that ended because the NeRD state diverged (``infos["diverged"]``).

    Each epoch's record also holds the mean per env-step of every reward term (``infos["reward_terms"]``: the task's
    terms, and an ensemble's ``disagreement`` penalty) and, with an ensemble, of the members' disagreement itself
    (``infos["disagreement"]``): what PPO traded for what. Both go to TensorBoard too (``reward_terms/<name>``,
    ``ensemble/disagreement``).

    Args:
        progress: Print one line per epoch.
        stream: Where to print (rl-games' own prints are silenced by redirecting ``sys.stdout``).
        checkpoint: Write the agent's full state here (atomically) after every ``checkpoint_every``-th epoch.
    """

    def __init__(self, progress: bool = True, stream: TextIO | None = None, checkpoint: Path | None = None,
                 checkpoint_every: int = 0):
        super().__init__()
        self.progress = progress
        self.stream = stream
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.history: list[dict[str, Any]] = []
        """One record per epoch that had finished episodes: epoch, frames (policy steps summed over the envs up to
        the end of the epoch, rl-games' "frames"), seconds, mean reward and length, and the epoch's means per
        env-step (``reward_terms``, ``disagreement``)."""
        self.episodes = 0
        """Episodes finished so far (all envs)."""
        self.diverged = 0
        """Of those, episodes ended by a non-finite NeRD state."""
        # Sums over the epoch's env-steps, kept as tensors so that a GPU run does not synchronise every step.
        self._term_sums: dict[str, torch.Tensor] = {}
        self._disagreement_sum: torch.Tensor | None = None
        self._steps = 0

    def process_infos(self, infos: dict, done_indices: torch.Tensor) -> None:
        super().process_infos(infos, done_indices)
        if isinstance(infos, dict) and "diverged" in infos:
            self.episodes += len(done_indices)
            self.diverged += int(infos["diverged"].sum())
        if not isinstance(infos, dict) or "reward_terms" not in infos:
            return
        for name, value in infos["reward_terms"].items():
            self._term_sums[name] = self._term_sums.get(name, 0) + value.detach().sum()
        if "disagreement" in infos:
            so_far = 0 if self._disagreement_sum is None else self._disagreement_sum  # no bool(tensor): a GPU sync
            self._disagreement_sum = so_far + infos["disagreement"].detach().sum()
        self._steps += len(infos["terminated"])

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        super().after_print_stats(frame, epoch_num, total_time)
        self._record(epoch_num, total_time)
        if self.checkpoint is not None and self.checkpoint_every > 0 and epoch_num % self.checkpoint_every == 0:
            # rl-games' own periodic saves write a new file each time, and not atomically: a kill mid-write
            # would leave the only recent state half-written.
            state = self.algo.get_full_state_weights()
            state["nerd_progress"] = {"history": self.history, "episodes": self.episodes, "diverged": self.diverged,
                                      "episode_stats": episode_stats(self.algo)}
            tmp = self.checkpoint.with_name(self.checkpoint.name + ".tmp")
            torch.save(state, tmp)
            os.replace(tmp, self.checkpoint)

    def _step_means(self, epoch_num: int) -> dict[str, Any]:
        """The epoch's means per env-step (reward terms, disagreement), logged to TensorBoard; the sums restart."""
        means: dict[str, Any] = {}
        if self._steps:
            means["reward_terms"] = {name: float(total) / self._steps for name, total in self._term_sums.items()}
            if self._disagreement_sum is not None:
                means["disagreement"] = float(self._disagreement_sum) / self._steps
            writer = getattr(self.algo, "writer", None)
            if writer is not None:
                for name, value in means["reward_terms"].items():
                    writer.add_scalar(f"reward_terms/{name}", value, epoch_num)
                if "disagreement" in means:
                    writer.add_scalar("ensemble/disagreement", means["disagreement"], epoch_num)
        self._term_sums, self._disagreement_sum, self._steps = {}, None, 0
        return means

    def _record(self, epoch_num: int, total_time: float) -> None:
        algo = self.algo
        step_means = self._step_means(epoch_num)
        if algo.game_rewards.current_size == 0:
            return
        # rl-games passes the frame count from before the epoch (0 after the first one); count the epoch's steps too.
        steps = int(algo.frame) // max(int(algo.num_agents), 1)
        record = {"epoch": int(epoch_num), "frames": steps, "seconds": float(total_time),
                  "mean_episode_reward": float(algo.game_rewards.get_mean()[0]),
                  "mean_episode_length": float(algo.game_lengths.get_mean()),
                  "episodes": self.episodes, "diverged_episodes": self.diverged, **step_means}
        self.history.append(record)
        if self.progress:
            diverged = f", {self.diverged} of {self.episodes} episodes so far diverged" if self.diverged else ""
            print(f"epoch {epoch_num}: mean episode reward {record['mean_episode_reward']:.2f}, "
                  f"length {record['mean_episode_length']:.1f} ({steps:,} env steps, {total_time:.0f} s){diverged}",
                  file=self.stream or sys.stdout, flush=True)


_EPISODE_METERS = ("game_rewards", "game_shaped_rewards", "game_lengths")


def episode_stats(agent) -> dict[str, dict[str, Any]]:
    """rl-games' running windows of the last finished episodes (reward, shaped reward, length) as plain values.

    rl-games keeps them out of its checkpoints. A resumed run's environments start fresh episodes, so without them
    its first reports (and a transfer round's ``train_reward``) would average only the episodes that ended early
    after the resume: an ANYmal round resumed 8 epochs before its end recorded 172 where it trained at 1238."""
    return {name: {"mean": getattr(agent, name).mean.detach().cpu().clone(),
                   "size": int(getattr(agent, name).current_size)} for name in _EPISODE_METERS}


def restore_episode_stats(agent, stats: dict[str, dict[str, Any]] | None) -> None:
    """Put :func:`episode_stats` back into ``agent``'s windows (nothing for a state saved without them)."""
    for name, saved in (stats or {}).items():
        if name in _EPISODE_METERS:
            meter = getattr(agent, name)
            meter.mean = saved["mean"].to(meter.mean.device, meter.mean.dtype).reshape(meter.mean.shape)
            meter.current_size = min(int(saved["size"]), int(meter.max_size))


def _seed_everything(seed: int) -> None:
    # rl-games seeds only when the seed is truthy, so seed 0 would go unseeded.
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_policy(cfg: RLConfig, logdir: str | Path, device: str = "cpu", seed: int = 0,
                 max_epochs: int | None = None, progress: bool = True, overwrite: bool = False,
                 init_from: str | Path | None = None, resume: bool = False, checkpoint_every: int | None = None
                 ) -> dict[str, Any]:
    """Train a PPO policy on ``cfg``'s task; returns a summary (checkpoint paths, per-epoch rewards, time).

    ``init_from`` continues the training of an rl-games checkpoint of the same network in a new run directory:
    its weights, input and value normalisation, optimiser, epoch and frame count are restored, so ``max_epochs``
    counts the epochs of the whole training, the checkpoint's included (the transfer loop's rounds, each in
    another NeRD model).

    ``resume`` continues the run in ``logdir`` itself from the newest state it left (:func:`interrupted_run_state`;
    the run writes its full state to ``nn/resume.pth`` after every ``checkpoint_every``-th epoch, default
    :data:`RESUME_EVERY_EPOCHS`, 0: never), up to ``max_epochs``: its checkpoints, TensorBoard events, epoch
    history and window of the last finished episodes (the reported mean reward) are kept, its environments start
    fresh episodes, and the random streams differ from an uninterrupted run's. The summary then has
    ``resumed_from_epoch``; ``train_seconds`` counts this process only.

    A previous run in ``logdir`` is refused unless ``overwrite``, and replaced only once the new run has
    started (:func:`nerd.run_dir.new_run_dir`). rl-games' own prints are silenced (``NERD_VERBOSE_RL=1`` keeps
    them); with ``progress``, one line per epoch is printed instead.

    Raises:
        RolloutDivergedError: If every training episode ended in a non-finite NeRD state (the run is kept).
    """
    from rl_games.torch_runner import Runner  # imported late: it changes torch's global print options

    check_env_config(cfg.env)
    # rl-games gets an absolute run directory; the files a run writes record the path as the user gave it, so
    # that a run directory (or a shipped copy of its files) does not carry this machine's paths.
    given = Path(logdir)
    logdir = given.resolve()
    params = resolve_params(cfg, device, seed, logdir, max_epochs)
    if params["config"].get("max_epochs", -1) < 1 and params["config"].get("max_frames", -1) < 1:
        raise UserError("set --max-epochs (or params.config.max_epochs) so that training ends")
    stream = sys.stdout
    # rl-games' multi-GPU runs (torchrun): rank 0 alone writes the run directory, as rl-games itself does.
    main_rank = not params["config"].get("multi_gpu") or rank_from_env().is_main
    resumed_epoch, resumed_state, progress_so_far = None, None, {}
    if resume:
        if params["config"].get("multi_gpu"):
            raise UserError("resuming continues single-process runs; a multi-GPU run has to be started again")
        found, resumed_epoch = interrupted_run_state(logdir, params["config"]["max_epochs"])
        if found is None:
            raise UserError(f"nothing to resume in {given}: no saved state before epoch "
                            f"{params['config']['max_epochs']} (a run writes nn/resume.pth every "
                            f"{RESUME_EVERY_EPOCHS} epochs and nn/last.pth at its end; a larger max_epochs extends "
                            "a finished run)")
        # Kept outside nn/, which the continuing run sets aside, until that run ends.
        init_from = logdir / KEPT_STATE
        if found != init_from:
            tmp = init_from.with_name(init_from.name + ".tmp")
            shutil.copyfile(found, tmp)
            os.replace(tmp, init_from)
        resumed_state = load_rl_games_checkpoint(init_from, device)
        progress_so_far = _progress_of(resumed_state, logdir, resumed_epoch)
        overwrite = True
        if progress:
            print(f"{given}: continuing from epoch {resumed_epoch} up to epoch {params['config']['max_epochs']}",
                  flush=True)
    run_dir = new_run_dir(logdir, RUN_DIR_ENTRIES, overwrite, "nn/*.pth") if main_rank else contextlib.nullcontext()
    with run_dir:
        resolved = {"env": to_dict(cfg.env), "params": copy.deepcopy(params)}
        resolved["params"]["config"]["train_dir"] = str(given.parent)
        if main_rank:
            write_run_record(logdir, resolved)
        register_with_rl_games()
        _seed_everything(seed)
        observer = ProgressObserver(progress and main_rank, stream, logdir / "nn" / RESUME_CHECKPOINT if main_rank
                                    else None, RESUME_EVERY_EPOCHS if checkpoint_every is None else checkpoint_every)
        observer.history = list(progress_so_far.get("history", []))
        observer.episodes = int(progress_so_far.get("episodes", 0))
        observer.diverged = int(progress_so_far.get("diverged", 0))
        with rl_games_quiet():
            runner = Runner(algo_observer=observer)
            runner.load({"params": params})
            # The agent is built directly rather than through Runner.run(), which would torch.compile the model
            # (minutes of compilation on a CPU) and gives no handle on the agent for the final save.
            agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
            if init_from is not None:
                agent.set_full_state_weights(resumed_state or load_rl_games_checkpoint(init_from, device),
                                             set_epoch=True)
                # rl-games restores the optimiser, its learning rate included, but resets the adaptive schedule's
                # current rate to the config's, which its first update then writes back: a continued run would
                # step at the initial rate where the schedule had lowered it (a policy collapse, seen on the Franka).
                agent.last_lr = float(agent.optimizer.param_groups[0]["lr"])
            if resume:
                # The finished episodes' window goes on where the interrupted run left it; a new run from
                # init_from (a transfer round in another model) starts its own.
                restore_episode_stats(agent, progress_so_far.get("episode_stats"))
                _carry_over(logdir)
            if main_rank:
                agent.writer.add_text("config", "```\n" + yaml.safe_dump(resolved, sort_keys=False) + "\n```")
            started = time.perf_counter()
            agent.train()
            if not main_rank:
                return {}
            last = logdir / "nn" / "last"
            agent.save(str(last))
            agent.writer.flush()
            # The run is complete: nothing to resume.
            (logdir / "nn" / RESUME_CHECKPOINT).unlink(missing_ok=True)
            (logdir / KEPT_STATE).unlink(missing_ok=True)
    best = logdir / "nn" / f"{params['config']['name']}.pth"
    summary = {"logdir": str(given), "last_checkpoint": str(given / "nn" / "last.pth"),
               "best_checkpoint": str(given / best.relative_to(logdir)) if best.is_file() else None,
               "train_seconds": time.perf_counter() - started, "episodes": observer.episodes,
               "diverged_episodes": observer.diverged, "epochs": observer.history}
    if resumed_epoch is not None:
        summary["resumed_from_epoch"] = resumed_epoch
    write_text_atomic(logdir / "train_summary.json", json.dumps(summary, indent=2))
    if observer.episodes and observer.diverged == observer.episodes:
        raise RolloutDivergedError(f"every one of the {observer.episodes} training episodes diverged (non-finite "
                                   f"NeRD states), so the policy in {logdir} learned nothing; check the NeRD model")
    return summary


def _progress_of(state: dict[str, Any], logdir: Path, epoch: int) -> dict[str, Any]:
    """The epoch history (and episode counts) of the run a resumed state belongs to, up to its ``epoch``: kept in
    the periodic state itself, with its window of finished episodes (:func:`episode_stats`), or, for a finished
    run's ``last.pth``, in its ``train_summary.json`` (no window)."""
    progress = state.get("nerd_progress")
    if progress is None and (logdir / "train_summary.json").is_file():
        summary = json.loads((logdir / "train_summary.json").read_text())
        progress = {"history": summary.get("epochs", []), "episodes": summary.get("episodes", 0),
                    "diverged": summary.get("diverged_episodes", 0)}
    progress = dict(progress or {})
    progress["history"] = [e for e in progress.get("history", []) if e["epoch"] <= epoch]
    return progress


def _carry_over(logdir: Path) -> None:
    """Copy a resumed run's checkpoints and TensorBoard events, which the continuing run has set aside
    (:func:`nerd.run_dir.new_run_dir`), into its new ``nn/`` and ``summaries/`` (files it has not written)."""
    for sub in ("nn", "summaries"):
        old = logdir / PREVIOUS_RUN / sub
        if not old.is_dir():
            continue
        (logdir / sub).mkdir(parents=True, exist_ok=True)
        for path in old.iterdir():
            target = logdir / sub / path.name
            if sub == "summaries":
                # Event files are named by the second they were opened; TensorBoard reads any *tfevents* name.
                count = 0
                while target.exists():
                    count += 1
                    target = logdir / sub / f"{path.name}.part{count}"
            if path.is_file() and not target.exists():
                shutil.copy2(path, target)


def interrupted_run_state(logdir: str | Path, max_epochs: int) -> tuple[Path | None, int | None]:
    """The latest full PPO state an interrupted run in ``logdir`` left, and its epoch (``None, None`` if none).

    Candidates: the run's ``nn/resume.pth``, its final ``nn/last.pth`` (a finished run, extended by a larger
    ``max_epochs``), rl-games' own periodic ``nn/last_<name>_ep_<n>_rew_<r>.pth``, and the state an earlier
    continuation kept (:data:`KEPT_STATE`, when that run was killed before its first save). States at or past
    ``max_epochs`` are left out (rl-games would train one epoch more). Reads only: ``train_policy(...,
    resume=True)`` keeps the newest as ``logdir/.resume_from.pth``, because the continuing run replaces ``nn/``.
    """
    logdir = Path(logdir)
    nn_dir, kept = logdir / "nn", logdir / KEPT_STATE
    candidates: list[tuple[int, Path]] = []
    for path in (nn_dir / RESUME_CHECKPOINT, nn_dir / "last.pth", kept):
        if path.is_file():
            epoch = load_rl_games_checkpoint(path).get("epoch")
            if isinstance(epoch, int):
                candidates.append((epoch, path))
    if nn_dir.is_dir():
        for path in nn_dir.iterdir():
            match = _RL_GAMES_PERIODIC.match(path.name)
            if match:
                candidates.append((int(match.group(1)), path))
    candidates = [(epoch, path) for epoch, path in candidates if epoch < max_epochs]
    if not candidates:
        return None, None
    epoch, path = max(candidates, key=lambda c: c[0])
    return path, epoch
