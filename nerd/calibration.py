"""One-step error of NeRD models on a dataset, and how well an ensemble's disagreement predicts it.

The transfer loop (:mod:`nerd.rl.transfer`) measures its models on each round's fresh ground-truth data of the
policy: how wrong they are where the policy goes, before and after the refinement.

The disagreement penalty and cutoff of the RL vec env (:class:`~nerd.rl.config.RLEnvConfig`) trust the members'
spread as a stand-in for the error PPO would exploit. This module measures that trust where it matters: on
ground-truth transitions the models were not trained on (the transfer loop's fresh policy data). For every window
the members predict the last step's target; with ``s`` the first model's target std (the units of
:attr:`~nerd.integrator.NeRDEnsembleIntegrator.disagreement`):

* ``disagreement`` = RMS over coordinates of (std over members) / s, the integrator's own definition;
* ``error`` = RMS over coordinates of (members' mean − true target) / s (for one model, its own prediction's);
* ``within_one_sigma``: the share of (window, coordinate) pairs whose true error lies within ±1 member std (a
  calibrated Gaussian spread gives 0.68; far less means the members agree on their mistakes);
* ``rank_correlation``: Spearman's correlation of the windows' disagreement with their error (1: the spread ranks
  the errors perfectly, as a penalty needs; 0: no information).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nerd.checkpoint import load_checkpoint
from nerd.datasets.windows import TrajectoryWindows
from nerd.errors import UserError
from nerd.evaluation import rank_correlation


@torch.no_grad()
def ensemble_calibration(model_paths: Sequence[str | Path], dataset: str | Path | Sequence[str | Path],
                         max_windows: int = 20_000, batch_size: int = 1024, device: str = "cpu", seed: int = 0
                         ) -> dict[str, Any]:
    """The one-step error of the model(s) ``model_paths`` (their mean prediction) on up to ``max_windows`` random
    windows of ``dataset``; for two models or more also the disagreement and its calibration (module docstring).

    Raises:
        UserError: No model, or models of other robots or inputs than each other or the data.
    """
    if not model_paths:
        raise UserError("name at least one model")
    loaded = [load_checkpoint(path, device) for path in model_paths]
    models = [model.eval() for model, _, _ in loaded]
    signature, history = loaded[0][1], loaded[0][2]["history_length"]
    for path, (model, sig, payload) in zip(model_paths, loaded, strict=True):
        if model.input_groups != models[0].input_groups or payload["history_length"] != history:
            raise UserError(f"{path} reads other inputs or another history than {model_paths[0]}")
        sig.check_compatible(signature, what=f"model {path}")
    data = TrajectoryWindows(dataset, history, device, joint_limits=signature.joint_limits,
                             joint_limit_lookahead=bool(signature.joint_limit_lookahead))
    data.signature.check_compatible(signature, what="dataset")
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randperm(len(data), generator=generator)[:max_windows]
    scale = torch.sqrt(models[0].target_norm.var + models[0].target_norm.eps).double()
    spreads, errors = [], []
    for start in range(0, len(ids), batch_size):
        inputs, target = data.get_batch(ids[start : start + batch_size].to(device))
        predictions = torch.stack([model.target_norm.denormalize(model(inputs)[:, -1]) for model in models])
        mean = predictions.double().mean(dim=0)
        spreads.append(predictions.double().std(dim=0, correction=0) / scale)
        errors.append((mean - target[:, -1].double()) / scale)
    spread, error = torch.cat(spreads), torch.cat(errors)  # (windows, P), in target stds
    rms_error = error.square().mean(dim=1).sqrt()
    result = {"models": [str(path) for path in model_paths], "windows": len(ids), "mean_error": float(rms_error.mean())}
    if len(models) > 1:
        disagreement = spread.square().mean(dim=1).sqrt()
        result.update(mean_disagreement=float(disagreement.mean()),
                      within_one_sigma=float((error.abs() <= spread).double().mean()),
                      rank_correlation=rank_correlation(disagreement, rms_error))
    return result
