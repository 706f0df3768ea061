"""PPO training with rl-games on a NeRDVecEnv, and playback of a trained policy by our own episode loop.

Training builds the rl-games agent from the resolved params (:func:`nerd.rl.config.resolve_params`) and
lets it create the vec env through the rl-games registry. The run directory holds::

    <logdir>/config.yaml          the resolved config (our env section + the rl-games params)
    <logdir>/git.yaml             commit and status of the code
    <logdir>/nn/<name>.pth        rl-games' best checkpoint (by mean training reward)
    <logdir>/nn/last.pth          the final policy
    <logdir>/summaries/           TensorBoard scalars written by rl-games (rewards/, losses/, performance/)
    <logdir>/train_summary.json   mean episode reward and length after every epoch

Playback loads an rl-games checkpoint (tensors and numpy scalars only, ``weights_only=True``) into rl-games' player
network and runs the deterministic policy (the Gaussian's mean) over exactly ``num_games`` episodes: each batch
resets every env and counts only the first episode of each, so short episodes are not over-represented.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import pickle
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import yaml
from rl_games.common.algo_observer import DefaultAlgoObserver
from tqdm import tqdm

from nerd.config import to_dict
from nerd.distributed import rank_from_env
from nerd.errors import RolloutDivergedError, UserError, first_line
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.rl.config import RUN_DIR_ENTRIES, RLConfig, resolve_params
from nerd.rl.vec_env import NeRDVecEnv, check_env_config, make_vec_env, register_with_rl_games
from nerd.run_dir import new_run_dir, write_run_record, write_text_atomic


class ProgressObserver(DefaultAlgoObserver):
    """Records (and prints) the mean episode reward and length of the last 100 episodes after every epoch, and
    counts the episodes that ended because the NeRD state diverged (``infos["diverged"]``).

    Args:
        progress: Print one line per epoch.
        stream: Where to print (rl-games' own prints are silenced by redirecting ``sys.stdout``).
    """

    def __init__(self, progress: bool = True, stream: TextIO | None = None):
        super().__init__()
        self.progress = progress
        self.stream = stream
        self.history: list[dict[str, float]] = []
        """One record per epoch that had finished episodes: epoch, frames (policy steps summed over the envs up to
        the end of the epoch, rl-games' "frames"), seconds, mean reward and length."""
        self.episodes = 0
        """Episodes finished so far (all envs)."""
        self.diverged = 0
        """Of those, episodes ended by a non-finite NeRD state."""

    def process_infos(self, infos: dict, done_indices: torch.Tensor) -> None:
        super().process_infos(infos, done_indices)
        if isinstance(infos, dict) and "diverged" in infos:
            self.episodes += len(done_indices)
            self.diverged += int(infos["diverged"].sum())

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        super().after_print_stats(frame, epoch_num, total_time)
        algo = self.algo
        if algo.game_rewards.current_size == 0:
            return
        # rl-games passes the frame count from before the epoch (0 after the first one); count the epoch's steps too.
        steps = int(algo.frame) // max(int(algo.num_agents), 1)
        record = {"epoch": int(epoch_num), "frames": steps, "seconds": float(total_time),
                  "mean_episode_reward": float(algo.game_rewards.get_mean()[0]),
                  "mean_episode_length": float(algo.game_lengths.get_mean()),
                  "episodes": self.episodes, "diverged_episodes": self.diverged}
        self.history.append(record)
        if self.progress:
            diverged = f", {self.diverged} of {self.episodes} episodes so far diverged" if self.diverged else ""
            print(f"epoch {epoch_num}: mean episode reward {record['mean_episode_reward']:.2f}, "
                  f"length {record['mean_episode_length']:.1f} ({steps:,} env steps, {total_time:.0f} s){diverged}",
                  file=self.stream or sys.stdout, flush=True)


class _Discard(io.TextIOBase):
    """A text stream that drops what is written to it."""

    def write(self, text: str) -> int:
        return len(text)


def rl_games_quiet() -> contextlib.AbstractContextManager:
    """Silence rl-games' own prints (network summaries, per-epoch fps, checkpoint notices) inside the block.

    Our progress lines go to a stream captured before the block. ``NERD_VERBOSE_RL=1`` keeps rl-games' prints.
    """
    if os.environ.get("NERD_VERBOSE_RL", "0") == "1":
        return contextlib.nullcontext()
    return contextlib.redirect_stdout(_Discard())


def _seed_everything(seed: int) -> None:
    # rl-games seeds only when the seed is truthy, so seed 0 would go unseeded.
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_policy(cfg: RLConfig, logdir: str | Path, device: str = "cpu", seed: int = 0,
                 max_epochs: int | None = None, progress: bool = True, overwrite: bool = False,
                 init_from: str | Path | None = None) -> dict[str, Any]:
    """Train a PPO policy on ``cfg``'s task; returns a summary (checkpoint paths, per-epoch rewards, time).

    ``init_from`` continues the training of an rl-games checkpoint of the same network in a new run directory:
    its weights, input and value normalisation, optimiser, epoch and frame count are restored, so ``max_epochs``
    counts the epochs of the whole training, the checkpoint's included (the transfer loop's rounds, each in
    another NeRD model).

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
    run_dir = new_run_dir(logdir, RUN_DIR_ENTRIES, overwrite, "nn/*.pth") if main_rank else contextlib.nullcontext()
    with run_dir:
        resolved = {"env": to_dict(cfg.env), "params": copy.deepcopy(params)}
        resolved["params"]["config"]["train_dir"] = str(given.parent)
        if main_rank:
            write_run_record(logdir, resolved)
        register_with_rl_games()
        _seed_everything(seed)
        observer = ProgressObserver(progress and main_rank, stream)
        with rl_games_quiet():
            runner = Runner(algo_observer=observer)
            runner.load({"params": params})
            # The agent is built directly rather than through Runner.run(), which would torch.compile the model
            # (minutes of compilation on a CPU) and gives no handle on the agent for the final save.
            agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
            if init_from is not None:
                agent.set_full_state_weights(load_rl_games_checkpoint(init_from, device), set_epoch=True)
            if main_rank:
                agent.writer.add_text("config", "```\n" + yaml.safe_dump(resolved, sort_keys=False) + "\n```")
            started = time.perf_counter()
            agent.train()
            if not main_rank:
                return {}
            last = logdir / "nn" / "last"
            agent.save(str(last))
            agent.writer.flush()
    best = logdir / "nn" / f"{params['config']['name']}.pth"
    summary = {"logdir": str(given), "last_checkpoint": str(given / "nn" / "last.pth"),
               "best_checkpoint": str(given / best.relative_to(logdir)) if best.is_file() else None,
               "train_seconds": time.perf_counter() - started, "episodes": observer.episodes,
               "diverged_episodes": observer.diverged, "epochs": observer.history}
    write_text_atomic(logdir / "train_summary.json", json.dumps(summary, indent=2))
    if observer.episodes and observer.diverged == observer.episodes:
        raise RolloutDivergedError(f"every one of the {observer.episodes} training episodes diverged (non-finite "
                                   f"NeRD states), so the policy in {logdir} learned nothing; check the NeRD model")
    return summary


def load_rl_games_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Load an rl-games checkpoint safely onto ``device`` (``weights_only=True``, never unrestricted unpickling).

    Besides tensors, rl-games pickles numpy scalars (the best reward) and their dtypes; exactly those globals
    are allowed, under numpy 2's module names and numpy 1's (``numpy.core.multiarray.scalar``, which the
    release's checkpoints use). Tensors saved from CUDA are mapped to ``device``.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        UserError: If it is not an rl-games checkpoint with a ``model`` state dict, or needs other globals.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"policy checkpoint not found: {path}")
    try:
        from numpy._core.multiarray import scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import scalar
    dtypes = [type(np.dtype(t)) for t in (np.float32, np.float64, np.int64)]
    safe = [np.dtype, scalar, (scalar, "numpy.core.multiarray.scalar"), *dtypes]
    try:
        with torch.serialization.safe_globals(safe):
            state = torch.load(path, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as err:
        raise UserError(f"{path} is not a loadable rl-games checkpoint ({_unpickling_reason(err)})") from err
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise UserError(f"{path} is not an rl-games checkpoint (no 'model' state dict)")
    return state


def _unpickling_reason(err: Exception) -> str:
    # torch's weights-only message opens with advice to unpickle unrestricted; the reason is its WeightsUnpickler line.
    for line in str(err).splitlines():
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].strip()
    return first_line(err)


class Policy:
    """The policy of an rl-games player: observations (N, obs_dim) -> actions (N, A).

    Deterministic (the Gaussian's mean, in [-1, 1]) unless ``stochastic``: then actions are sampled with the
    policy's own exploration noise, as in training (the vec env clamps them to [-1, 1]).

    A recurrent network (the Franka configs' LSTM) carries one hidden state per env from call to call, as in
    training; :meth:`reset` zeroes it when new episodes start. Without that, rl-games' player hands the network no
    state and a recurrent policy would act from a fresh zero state at every step.
    """

    def __init__(self, player, stochastic: bool = False) -> None:
        self._player = player
        self.stochastic = stochastic

    @property
    def recurrent(self) -> bool:
        """Whether the network keeps a hidden state."""
        return bool(self._player.is_rnn)

    def reset(self) -> None:
        """Start new episodes in every env: the hidden states are zeroed (sized at the next call)."""
        self._player.states = None

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        player = self._player
        if player.is_rnn and (player.states is None or player.states[0].shape[1] != obs.shape[0]):
            player.batch_size = obs.shape[0]
            player.init_rnn()
        return player.get_action(obs.to(player.device), is_deterministic=not self.stochastic)


def load_policy(cfg: RLConfig, checkpoint: str | Path, env_info: dict, device: str = "cpu",
                stochastic: bool = False) -> Policy:
    """The policy of an rl-games checkpoint (:class:`Policy`; deterministic unless ``stochastic``).

    The network is rebuilt from ``cfg.params`` (it must match the one that was trained).
    """
    from rl_games.torch_runner import Runner  # imported late: it changes torch's global print options

    state = load_rl_games_checkpoint(checkpoint, device)
    cfg = copy.deepcopy(cfg)
    config = cfg.params["config"]
    # The player never updates the policy: one minibatch keeps any env count valid.
    config["minibatch_size"] = cfg.env.num_envs * config["horizon_length"]
    params = resolve_params(cfg, device, seed=0)
    with rl_games_quiet():
        runner = Runner()
        runner.load({"params": params})
        # With env_info given, the player builds its network without creating an env of its own.
        runner.params["config"]["env_info"] = env_info
        player = runner.create_player()
    try:
        player.model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise UserError(f"{checkpoint} does not match the network of the RL config "
                         f"({first_line(err)})") from err
    player.has_batch_dimension = True
    return Policy(player, stochastic)


@torch.no_grad()
def evaluate_policy(vec_env: NeRDVecEnv, act: Callable[[torch.Tensor], torch.Tensor], num_games: int,
                    seed: int | None = None, progress: bool = False, desc: str = "playback") -> dict[str, Any]:
    """Run ``num_games`` whole episodes of ``act`` in ``vec_env``.

    With ``progress`` a bar on stderr (``desc``) counts the finished episodes out of ``num_games``.

    Returns:
        ``episode_rewards`` and ``episode_lengths`` (lists, one per episode), their means and (population)
        standard deviations, ``num_games`` and ``num_diverged``, the episodes ended by a non-finite NeRD state
        (their reward stops there, so they pull the mean down: report them next to it); for diagnostics,
        ``reward_terms`` (each of the task's reward terms summed over an episode, mean over episodes) and
        ``observation_mean``/``observation_std`` (over every observation the policy acted on); in neural mode with
        a NeRD model that keeps its training data's range, ``outside_data``: the mean share of an episode's steps
        whose inputs left it (by the vec env's ``data_margin``) and how many episodes had any.

    Raises:
        RolloutDivergedError: If every episode diverged (the reward would be a meaningless 0 ± 0).
    """
    if num_games < 1:
        raise UserError(f"--num-games must be positive, got {num_games}")
    if seed is not None:
        vec_env.seed(seed)
    vec_env.track_outside_data = True
    outside_steps: list[float] = []  # per episode: the share of its steps beyond the model's training data
    returns: list[float] = []
    lengths: list[int] = []
    num_diverged = 0
    term_sums: dict[str, float] = {}
    obs_sum = obs_sq = obs_count = 0
    n = vec_env.num_envs
    bar = tqdm(total=num_games, desc=desc, unit="episode", mininterval=1.0, disable=not progress)
    while len(returns) < num_games:
        take = min(n, num_games - len(returns))
        obs = vec_env.reset()
        if isinstance(act, Policy):
            act.reset()  # every env starts an episode
        ret = torch.zeros(n, dtype=torch.float64, device=vec_env.device)
        length = torch.zeros(n, dtype=torch.long, device=vec_env.device)
        terms: dict[str, torch.Tensor] = {}
        active = torch.zeros(n, dtype=torch.bool, device=vec_env.device)
        diverged = torch.zeros(n, dtype=torch.bool, device=vec_env.device)
        outside = None
        active[:take] = True
        running = take  # episodes of this batch still running (one host read per step)
        while running:
            live = obs[active].double()
            obs_sum, obs_sq, obs_count = obs_sum + live.sum(0), obs_sq + (live**2).sum(0), obs_count + len(live)
            obs, rewards, dones, infos = vec_env.step(act(obs))
            for name, value in {"reward": rewards, **infos["reward_terms"]}.items():
                terms[name] = terms.get(name, 0) + torch.where(active, value.double(), 0.0)
            length += active.long()
            diverged |= active & infos["diverged"]
            if "outside_data" in infos:
                outside = (0 if outside is None else outside) + (active & infos["outside_data"]).long()
            active &= ~dones.bool()
            still = int(active.sum())
            bar.update(running - still)
            running = still
        ret = terms.pop("reward")
        returns += ret[:take].tolist()
        lengths += length[:take].tolist()
        num_diverged += int(diverged[:take].sum())
        if outside is not None:
            outside_steps += (outside[:take].double() / length[:take].clamp(min=1)).tolist()
        for name, value in terms.items():
            term_sums[name] = term_sums.get(name, 0.0) + float(value[:take].sum())
    bar.close()
    if num_diverged == len(returns):
        raise RolloutDivergedError(f"all {num_diverged} episodes diverged (non-finite NeRD states); the NeRD model "
                                   "cannot simulate this policy, so there is no reward to report")
    extra = {}
    if outside_steps:
        shares = np.asarray(outside_steps)
        extra["outside_data"] = {"margin": vec_env.data_margin, "mean_share_of_steps": float(shares.mean()),
                                 "episodes_outside": int((shares > 0).sum())}
    r, ln = np.asarray(returns), np.asarray(lengths, dtype=np.float64)
    obs_mean = obs_sum / obs_count
    obs_std = (obs_sq / obs_count - obs_mean**2).clamp(min=0).sqrt()
    return {"num_games": len(returns), "num_diverged": num_diverged, "mean_reward": float(r.mean()),
            "std_reward": float(r.std()), "mean_length": float(ln.mean()), "std_length": float(ln.std()),
            "reward_terms": {name: total / len(returns) for name, total in term_sums.items()},
            "observation_mean": obs_mean.tolist(), "observation_std": obs_std.tolist(),
            "episode_rewards": returns, "episode_lengths": lengths, **extra}


def play_policy(cfg: RLConfig, checkpoint: str | Path, num_games: int, device: str = "cpu", seed: int = 0,
                num_envs: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Evaluate a checkpoint in ``cfg.env``'s simulator; returns :func:`evaluate_policy`'s summary + settings.

    ``num_envs`` (default: the config's) is capped at ``num_games``: every env plays one episode per batch.
    ``progress`` shows a bar of finished episodes on stderr.
    """
    cfg = copy.deepcopy(cfg)
    cfg.env = cfg.env.for_evaluation()
    cfg.env.num_envs = min(cfg.env.num_envs if num_envs is None else num_envs, num_games)
    vec_env = make_vec_env(cfg.env, device, seed)
    act = load_policy(cfg, checkpoint, vec_env.get_env_info(), device)
    result = evaluate_policy(vec_env, act, num_games, seed, progress=progress,
                             desc=f"{cfg.env.robot} {cfg.env.task} in {cfg.env.env_mode}")
    neural = cfg.env.env_mode == NEURAL
    return {"robot": cfg.env.robot, "task": cfg.env.task, "env_mode": cfg.env.env_mode,
            "nerd_model_path": cfg.env.nerd_model_path if neural else None,
            "nerd_mirror": neural and cfg.env.nerd_mirror,
            "checkpoint": str(checkpoint), "seed": seed, **result}


@torch.no_grad()
def show_policy(cfg: RLConfig, checkpoint: str | Path, device: str = "cpu", seed: int = 0, **view_args
                ) -> dict[str, Any]:
    """One episode of a checkpoint's policy in the ground truth and, when the config names a NeRD model, in NeRD
    next to it, from the same reset state (the seed's first); each copy acts on its own observations.

    ``view_args`` go to :func:`nerd.viewer.record` (viewer, output_path, video, video_size, progress).

    Returns:
        :func:`nerd.viewer.record`'s summary and ``episode_reward`` per copy (up to its first termination).
    """
    from nerd.viewer import GROUND_TRUTH_COLOR, NERD_COLOR, record

    cfg = copy.deepcopy(cfg)
    cfg.env = cfg.env.for_evaluation()
    cfg.env.num_envs = 1
    modes = [GROUND_TRUTH] + ([NEURAL] if cfg.env.nerd_model_path else [])
    vec_envs = []
    for mode in modes:
        cfg.env.env_mode = mode
        vec_envs.append(make_vec_env(cfg.env, device, seed))
    # One policy per copy: a recurrent one keeps each copy's hidden state apart.
    acts = [load_policy(cfg, checkpoint, vec_envs[0].get_env_info(), device) for _ in vec_envs]
    observations = [vec_env.reset() for vec_env in vec_envs]
    rewards = [0.0] * len(vec_envs)
    running = [True] * len(vec_envs)

    def advance() -> list[torch.Tensor]:
        for i, vec_env in enumerate(vec_envs):
            observations[i], reward, done, _ = vec_env.step(acts[i](observations[i]))
            if running[i]:
                rewards[i] += float(reward[0])
                running[i] = not bool(done[0])
        return [vec_env.nenv.get_body_q()[0] for vec_env in vec_envs]

    labels = ["ground truth", "NeRD"][: len(vec_envs)]
    shown = record(vec_envs[0].nenv.env, [GROUND_TRUTH_COLOR, NERD_COLOR][: len(vec_envs)], vec_envs[0].episode_length,
                   vec_envs[0].nenv.frame_dt, advance, [v.nenv.get_body_q()[0] for v in vec_envs], labels=labels,
                   **view_args)
    return {**shown, "episode_reward": dict(zip(labels, rewards, strict=False))}


def format_playback(result: dict[str, Any]) -> str:
    """One line: mean ± std episode reward and length, and how many episodes diverged (neural mode)."""
    diverged = (f"; {result['num_diverged']} of {result['num_games']} episodes diverged"
                if result["env_mode"] == NEURAL or result["num_diverged"] else "")
    outside = result.get("outside_data")
    outside = (f"; {100 * outside['mean_share_of_steps']:.1f} % of steps beyond the NeRD model's training data "
               f"({outside['episodes_outside']} of {result['num_games']} episodes)" if outside else "")
    return (f"{result['robot']} {result['task']} ({result['env_mode']}), {result['num_games']} episodes: "
            f"reward {result['mean_reward']:.2f} ± {result['std_reward']:.2f}, "
            f"length {result['mean_length']:.1f} ± {result['std_length']:.1f}{diverged}{outside}")
