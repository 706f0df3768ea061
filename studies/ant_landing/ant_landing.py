r"""Where the Ant's passive error comes from: the fall, the landing and the resting pose, NeRD against the ground truth.

From the release's passive protocol (the Ant's env reset: torso 1 m up, hips near 0, ankles near +-1 rad, zero
torques) the Ant falls for about 20 frames, lands on its legs and settles. This script rolls out the ground truth
and each given NeRD model from the same initial states and reports, against the step (means over rollouts):

* torso height [m] and tilt [deg] (angle between the torso's z axis and the world's);
* mean |hip| and |ankle| angle [rad];
* the hips' signed error (model − ground truth, mean over hips and rollouts) [rad]: a zero-torque prediction biased
  in one direction moves every hip the same way while the Ant falls, where the ground truth's hips barely move;
* hip sides: the share of hips that the ground truth has turned by more than ``--side-threshold`` rad and the model
  has turned the other way (a hip sent to the wrong side at the landing stays there).

Writes a JSON (every step), a Markdown table (selected steps) and a PNG.

Example (the numbers in pretrained_models/NeRD_models/Ant/README.md):
    python studies/ant_landing/ant_landing.py --model-paths runs/ant_model_afe40fe.pt runs/Ant_tail29/nn/best.pt \
        pretrained_models/NeRD_models/Ant/model.pt --num-rollouts 256 --horizon 500 \
        --output studies/ant_landing/results/ant_landing.json
"""

from pathlib import Path

import torch

from nerd.checkpoint import checkpoint_label
from nerd.cli import add_common_args, check_report_outputs, make_parser, resolve_device, run_main, write_report
from nerd.envs import make_env
from nerd.envs.ant import HINGES
from nerd.evaluation import initial_state_sampler, rollout
from nerd.frames import quat_to_matrix
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment

TABLE_STEPS = (5, 10, 20, 30, 50, 100, 200, 500)
_HINGE0 = 7  # first hinge coordinate of the Ant's q: after the free joint's position and quaternion
HIPS = slice(_HINGE0, _HINGE0 + HINGES, 2)  # each leg's (hip, ankle) pair, in LEGS order
ANKLES = slice(_HINGE0 + 1, _HINGE0 + HINGES, 2)


def pose_summary(states: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per step (T+1, N) torso height, tilt [deg] and the hinges (T+1, N, 4) of Ant states (T+1, N, S)."""
    cos_tilt = quat_to_matrix(states[..., 3:7])[..., 2, 2]  # world z of the torso's z axis
    return {"height": states[..., 2], "tilt": torch.rad2deg(torch.acos(cos_tilt.clamp(-1.0, 1.0))),
            "hips": states[..., HIPS], "ankles": states[..., ANKLES]}


def landing(model_paths: list[str], num_rollouts: int, horizon: int, seed: int, side_threshold: float,
            device: str) -> dict:
    """Ground truth and each model from the same env-reset states (module docstring); JSON-ready."""
    env = make_env("Ant", num_rollouts, device=device)
    initial = initial_state_sampler(env, "task")(num_rollouts, torch.Generator().manual_seed(seed))
    nenv = NeuralEnvironment(env, None, env_mode=GROUND_TRUTH)
    truth = pose_summary(rollout(nenv, initial, horizon, GROUND_TRUTH))
    turned = truth["hips"].abs() > side_threshold

    def curves(pose: dict[str, torch.Tensor], reference: dict[str, torch.Tensor] | None) -> dict[str, list[float]]:
        out = {"height": pose["height"].mean(1), "tilt": pose["tilt"].mean(1),
               "abs_hip": pose["hips"].abs().mean((1, 2)), "abs_ankle": pose["ankles"].abs().mean((1, 2))}
        if reference is not None:
            out["hip_bias"] = (pose["hips"] - reference["hips"]).mean((1, 2))
            wrong = turned & (pose["hips"].sign() != reference["hips"].sign())
            out["hips_wrong_side"] = wrong.double().sum((1, 2)) / turned.double().sum((1, 2)).clamp(min=1)
        return {name: value.double().cpu().tolist() for name, value in out.items()}

    rows = {"ground truth": curves(truth, None)}
    for path in model_paths:
        model_env = NeuralEnvironment.from_checkpoint(env, path, GROUND_TRUTH)
        rows[path] = curves(pose_summary(rollout(model_env, initial, horizon, NEURAL)), truth)
    return {"env_name": "Ant", "initial_states": "task", "num_rollouts": num_rollouts, "horizon": horizon,
            "seed": seed, "side_threshold": side_threshold, "mass_matrix_refresh": env.mass_matrix_refresh,
            "contact_friction": env.contact_friction, "curves": rows}


def format_table(results: dict) -> str:
    """Markdown: per simulator and selected step, the pose summary."""
    steps = [s for s in TABLE_STEPS if s <= results["horizon"]]
    lines = ["| simulator | step | height [m] | tilt [deg] | mean abs hip [rad] | mean abs ankle [rad] | "
             "hip error, signed mean [rad] | hips on the wrong side |", "|---|---|---|---|---|---|---|---|"]
    for name, curve in results["curves"].items():
        for s in steps:
            model = "hips_wrong_side" in curve
            bias = f"{curve['hip_bias'][s]:+.3f}" if model else "–"
            wrong = f"{100 * curve['hips_wrong_side'][s]:.0f} %" if model else "–"
            lines.append(f"| {name} | {s} | {curve['height'][s]:.3f} | {curve['tilt'][s]:.1f} | "
                         f"{curve['abs_hip'][s]:.3f} | {curve['abs_ankle'][s]:.3f} | {bias} | {wrong} |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    """One panel per quantity against the step, one curve per simulator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["height", "tilt", "abs_hip", "abs_ankle", "hip_bias", "hips_wrong_side"]
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.4))
    for ax, name in zip(axes, names, strict=True):
        for label, curve in results["curves"].items():
            if name in curve:
                ax.plot(curve[name], label=checkpoint_label(label))
        ax.set_xlabel("step")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Ant from the env reset, zero torques ({results['num_rollouts']} rollouts, seed {results['seed']})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--model-paths", nargs="+", required=True, help="Ant NeRD checkpoints to compare")
    parser.add_argument("--num-rollouts", type=int, default=256)
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument("--side-threshold", type=float, default=0.2,
                        help="a hip counts for the side check once the ground truth has turned it this far [rad]")
    parser.add_argument("--output", required=True, help="JSON path; the table (.md) and plot (.png) go beside it")
    add_common_args(parser, seed_default=500)
    args = parser.parse_args()
    output, png = check_report_outputs(args.output, args.overwrite, plot=True)
    results = landing(args.model_paths, args.num_rollouts, args.horizon, args.seed, args.side_threshold,
                      resolve_device(args.device))
    write_report(output, results, format_table(results))
    plot(results, png)


if __name__ == "__main__":
    run_main(main)
