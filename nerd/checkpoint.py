"""Self-describing, safely loadable NeRD checkpoints.

A checkpoint holds only tensors and plain types, so it loads with ``torch.load(weights_only=True)``: the
model's state dict (normalisation statistics included, as buffers), its backbone config, the robot signature
(state/contact/torque layout, checked against the environment on use), the history length H the model was
trained with (the integrator keeps that many tokens), the training config, the epoch and optionally the
optimiser state. Files are written atomically (temporary file, then rename).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nerd.config import ConfigError, from_dict, to_dict
from nerd.errors import UserError, first_line
from nerd.features import MODEL_OPTIONS, RobotSignature
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.paths import REPO_ROOT

CHECKPOINT_FORMAT = "nerd-checkpoint-v1"


SHIPPED_MODELS = REPO_ROOT / "pretrained_models" / "NeRD_models"
"""Where a source checkout keeps the shipped NeRD models, one ``<robot>/model.pt`` each."""


def shipped_model_path(env_name: str) -> Path | None:
    """The shipped NeRD model of ``env_name`` in this source checkout, or None where the robot has none."""
    path = SHIPPED_MODELS / env_name / "model.pt"
    return path if path.is_file() else None


def checkpoint_label(path: str | Path) -> str:
    """A short name for a checkpoint in plots and tables: the run directory of a training run's ``<run>/nn/<file>``,
    the robot folder of a shipped ``<robot>/model.pt``, else the file's stem."""
    p = Path(path)
    if p.parent.name == "nn":
        return p.parent.parent.name
    return p.parent.name if p.name == "model.pt" else p.stem


def save_checkpoint(path: str | Path, model: NeRDModel, signature: RobotSignature, config: dict[str, Any], *,
                    history_length: int, epoch: int = 0, optimizer: torch.optim.Optimizer | None = None,
                    extra: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint of ``model`` for the robot ``signature`` to ``path`` (atomically).

    Raises:
        UserError: If ``signature``'s model options (input frame, contact inputs, prediction) are not the model
            config's: the checkpoint would describe another model than its weights.
    """
    stated = {key: getattr(model.cfg, key) for key in MODEL_OPTIONS}
    if signature.model_options != stated:
        raise UserError(f"save_checkpoint: the signature's model options {signature.model_options} are not the "
                        f"model's {stated}")
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model_state": model.state_dict(),
        "model_config": to_dict(model.cfg),
        "signature": signature.to_dict(),
        "history_length": int(history_length),
        "config": config,
        "epoch": epoch,
        "optimizer_state": optimizer.state_dict() if optimizer is not None else None,
        "extra": extra or {},
    }
    if model.data_range is not None:
        payload["data_range"] = {"low": model.data_range[0].detach().cpu(), "high": model.data_range[1].detach().cpu()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        # A full disk surfaces as an OSError or as a RuntimeError from torch's zip writer ("iostream error",
        # "unexpected pos"), which is how torch.save reports failed writes; the previous file at ``path`` is
        # untouched either way.
        tmp.unlink(missing_ok=True)
        raise UserError(f"could not write {path} ({first_line(err)}); the previous {path.name}, if any, is intact "
                        "(free some disk space and resume)") from err
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """The payload of a nerd checkpoint file, without building its model (tensors on ``device``).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        UserError: If the file is not a nerd checkpoint (truncated, another format, unsafe pickled objects).
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a checkpoint file (e.g. {path / 'nn' / 'best.pt'})")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, IndexError, ValueError) as err:
        # Another kind of file fails inside torch's readers in many ways (a text file: an IndexError).
        raise UserError(f"{path} is not a loadable nerd checkpoint ({first_line(err)})") from err
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not a nerd checkpoint (expected format '{CHECKPOINT_FORMAT}')")
    return payload


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu"
                    ) -> tuple[NeRDModel, RobotSignature, dict[str, Any]]:
    """Load a checkpoint: (model on ``device``, robot signature, full payload with an int ``history_length``).

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file is not a nerd checkpoint (or was saved with unsafe pickled objects).
    """
    path = Path(path)
    payload = read_checkpoint(path, device)
    try:
        signature = RobotSignature.from_dict(payload["signature"])
        model_config = dict(payload["model_config"])
        if isinstance(model_config.get("rnn"), dict):
            # Files written before model.type alone chose the recurrent cell also stored a redundant rnn.cell.
            model_config["rnn"] = {k: v for k, v in model_config["rnn"].items() if k != "cell"}
        model_cfg = from_dict(ModelConfig, model_config)
        # The model options live in both (the signature builds the inputs, the model config is the training
        # config's section); a file where they disagree was not written by save_checkpoint.
        stated = {key: getattr(model_cfg, key) for key in MODEL_OPTIONS}
        if signature.model_options != stated:
            raise TypeError(f"its signature's model options {signature.model_options} differ from its model "
                            f"config's {stated}")
        model = NeRDModel(signature.input_groups, signature.target_dim, model_cfg)
        model.load_state_dict(payload["model_state"])
        if "data_range" in payload:
            low, high = payload["data_range"]["low"].float().cpu(), payload["data_range"]["high"].float().cpu()
            if low.shape != (model.input_dim,) or high.shape != (model.input_dim,):
                raise TypeError(f"data_range must hold {model.input_dim} values per bound, got {tuple(low.shape)}")
            model.data_range = (low, high)
        # Files written before history_length was a field of its own state it in their training config only.
        config = payload.get("config")
        legacy = config.get("history_length") if isinstance(config, dict) else None
        history_length = payload.setdefault("history_length", legacy)
        if isinstance(history_length, bool) or not isinstance(history_length, int) or history_length < 1:
            raise TypeError(f"history_length must be a positive integer, got {history_length!r}")
    except (KeyError, TypeError, ConfigError, RuntimeError) as err:
        raise UserError(f"{path}: damaged nerd checkpoint ({first_line(err)})") from err
    return model.to(device), signature, payload


def average_checkpoints(paths: Sequence[str | Path], device: str | torch.device = "cpu"
                        ) -> tuple[NeRDModel, RobotSignature, dict[str, Any]]:
    """The element-wise mean of the weights of several checkpoints of one model (weight averaging).

    Averaging points of one training trajectory (say a low-rate tail's first and last checkpoints) can land
    lower in the loss than either; it is only meaningful between fine-tunes of one model, so every input must
    share the robot signature, the model config, the history length and, exactly, the normalisation
    statistics. Returns what :func:`load_checkpoint` does, for the averaged model; the payload (of the first
    input, without its optimiser state) records the inputs under ``extra["averaged_from"]``.

    Raises:
        UserError: Fewer than two inputs, or inputs that are not fine-tunes of one model.
    """
    if len(paths) < 2:
        raise UserError(f"averaging needs at least two checkpoints, got {len(paths)}")
    model, signature, payload = load_checkpoint(paths[0], device)
    learned = {name for name, _ in model.named_parameters()}
    first = payload["model_state"]
    total = {name: first[name].double() for name in learned}
    _check_finite_weights(paths[0], first, learned)
    for path in paths[1:]:
        other_model, other_signature, other = load_checkpoint(path, device)
        _check_finite_weights(path, other["model_state"], learned)
        if other_signature != signature:
            raise UserError(f"{path} is for another robot or state layout than {paths[0]}; cannot average them")
        # Compared as loaded (defaults filled in): a file written before a config key existed means its default.
        if to_dict(other_model.cfg) != to_dict(model.cfg) or other["history_length"] != payload["history_length"]:
            raise UserError(f"{path} has another model config or history length than {paths[0]}; "
                            f"cannot average them")
        for name, value in other["model_state"].items():
            if name in learned:
                total[name] += value.double()
            elif not torch.equal(value, first[name]):
                raise UserError(f"{path} has other normalisation statistics ({name}) than {paths[0]}: only "
                                f"fine-tunes of one model (trained with --init-from) can be averaged")
    state = dict(first)
    for name in learned:
        state[name] = (total[name] / len(paths)).to(first[name].dtype)
    model.load_state_dict(state)
    payload = dict(payload, model_state=model.state_dict(), optimizer_state=None,
                   extra={"averaged_from": [str(p) for p in paths]})
    return model, signature, payload


def _check_finite_weights(path: str | Path, state: dict[str, torch.Tensor], names: set[str]) -> None:
    """Refuse a checkpoint whose learned weights hold NaN or inf (its mean with anything is not finite)."""
    bad = sorted(name for name in names if not bool(torch.isfinite(state[name]).all()))
    if bad:
        raise UserError(f"{path} holds non-finite weights ({bad[0]}{' and more' if len(bad) > 1 else ''}); "
                        "leave it out of the average")
