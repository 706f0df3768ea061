r"""Where a pendulum model's passive error comes from: rollouts in which joint 0 crosses ±π (where its wrapped angle
jumps) against those in which it does not, and the error of the first steps by the initial |q0|.

The ablation's world-frame variant of the pendulum loses NeRD's gravity input, (sin q0, 0, -cos q0) in the first
link's frame, and keeps joint 0's wrapped angle, which jumps at ±π. If the jump were what the variant pays for, its
error would gather in the rollouts that cross it and in the steps that start near it; this script measures both,
for any models of the double pendulum, on the ablation's protocol (contact-free ground, the task reset, zero
torques).

Example, from the repository root, after the study's pendulum case:
    OMP_NUM_THREADS=1 python studies/ablation/wrap_split.py --models nerd=runs/ablation/pendulum/nerd/nn/best.pt \
        world_frame=runs/ablation/pendulum/world_frame/nn/best.pt --num-rollouts 512 \
        --output runs/ablation/wrap_split.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from nerd.cli import check_json_output, run_main
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.evaluation import rollout, state_errors
from nerd.frames import wrap_angle
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment
from nerd.run_dir import write_text_atomic

ENV_NAME = "PendulumWithContact"
Q0_BINS = (0.0, 1.0, 2.0, 2.7, math.pi + 1e-6)
"""Bins of the initial |q0| [rad] for the first steps' error; the last one ends at the jump."""
FIRST_STEPS = 5


def wrap_split(models: dict[str, str], num_rollouts: int, horizon: int, seed: int) -> dict:
    """Each model's mean joint-angle error (the ablation's metric) over all rollouts, over those in which joint 0
    crosses ±π and over the others, and over the first :data:`FIRST_STEPS` steps by the initial |q0|; one batch of
    ``num_rollouts`` from the same initial states for every model."""
    env = make_env(ENV_NAME, num_rollouts, contact_config=0)
    initial = env.sample_reset_states(num_rollouts, torch.Generator().manual_seed(seed))
    truth = None
    errors = {}
    for name, path in models.items():
        nenv = NeuralEnvironment.from_checkpoint(env, path)
        if truth is None:
            truth = rollout(nenv, initial, horizon, GROUND_TRUTH)
        per_step = state_errors(truth[1:], rollout(nenv, initial, horizon, NEURAL)[1:], env)
        errors[name] = 0.5 * (per_step["base_orientation_error"] + per_step["joint_position_error"])  # (H, N)
    q0 = wrap_angle(truth[:, :, 0])
    crosses = ((q0[1:] - q0[:-1]).abs() > math.pi).any(dim=0)
    start = q0[0].abs()
    bins = [(start >= lo) & (start < hi) for lo, hi in zip(Q0_BINS[:-1], Q0_BINS[1:], strict=True)]
    result = {"num_rollouts": num_rollouts, "horizon": horizon, "seed": seed, "rollouts_crossing": int(crosses.sum()),
              "q0_bins": list(Q0_BINS), "rollouts_per_bin": [int(b.sum()) for b in bins], "models": {}}
    for name, err in errors.items():
        per_rollout = err.mean(dim=0)
        result["models"][name] = {"all": float(per_rollout.mean()), "crossing": _mean(per_rollout, crosses),
                                  "not_crossing": _mean(per_rollout, ~crosses),
                                  "first_steps_by_q0": [_mean(err[:FIRST_STEPS], b) for b in bins]}
    return result


def _mean(values: torch.Tensor, rollouts: torch.Tensor) -> float | None:
    """The mean of ``values`` (..., N) over the rollouts selected by the mask ``rollouts`` (N,); None if none."""
    return float(values[..., rollouts].mean()) if bool(rollouts.any()) else None


def parse_models(pairs: list[str]) -> dict[str, str]:
    """``name=path`` pairs as a dict, each path an existing file."""
    models = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--models takes name=path pairs, got '{pair}'")
        if not Path(path).is_file():
            raise UserError(f"{path} (model '{name}') is not a file")
        models[name] = path
    return models


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", required=True, help="name=checkpoint pairs of pendulum models")
    parser.add_argument("--num-rollouts", type=int, default=512)
    parser.add_argument("--rollout-horizon", type=int, default=100)
    parser.add_argument("--seed", type=int, default=500)
    parser.add_argument("--output", required=True, help="JSON file")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    output, _ = check_json_output(args.output, args.overwrite, None)
    if args.num_rollouts < 1 or args.rollout_horizon < 1:
        raise UserError("--num-rollouts and --rollout-horizon must be positive")
    result = wrap_split(parse_models(args.models), args.num_rollouts, args.rollout_horizon, args.seed)
    def rad(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    bins = ", ".join(f"{lo:.1f}-{hi:.1f}" for lo, hi in zip(Q0_BINS[:-1], Q0_BINS[1:], strict=True))
    for name, m in result["models"].items():
        print(f"{name}: {rad(m['all'])} rad; joint 0 crosses ±π in {result['rollouts_crossing']} of "
              f"{args.num_rollouts} rollouts: {rad(m['crossing'])} there, {rad(m['not_crossing'])} elsewhere; "
              f"steps 1-{FIRST_STEPS} by initial |q0| ({bins}): {', '.join(map(rad, m['first_steps_by_q0']))}")
    output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output, json.dumps(result, indent=2) + "\n", overwrite=args.overwrite)
    print(f"wrote {output}")


if __name__ == "__main__":
    run_main(main)
