"""Loading a trained rl-games policy: the checkpoint (safely, ``weights_only=True``) and the player network that acts.

Playback (:mod:`nerd.rl.playback`), batch evaluation, the transfer loop's data collection and the release's
published policies all act through :func:`load_policy`. rl-games prints freely; :func:`rl_games_quiet` keeps its
prints out of our progress lines.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nerd.errors import UserError, first_line
from nerd.rl.config import RLConfig, resolve_params


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


