r"""Where the Cartpole's long-horizon error comes from: the rail's end stops.

From the release's passive protocol (the env reset: x, ẋ, θ̇ ~ U(−1, 1), θ ~ U(−π, π), zero force, 1000 steps) most
carts roll into one of the rail's limits at ±4 m, a stiff spring (ke 1e4, kd 10) that bounces them back, and the
bounce jerks the free pole. This script rolls out the ground truth and each given NeRD model from the same initial
states and reports, per model:

* the errors over steps 1..H of the rollouts whose ground-truth cart reaches a limit and of those that never do;
* the errors around the first bounce (steps relative to the first frame beyond the limit, over the rollouts whose
  first bounce comes after step 20 and at least 100 steps before the end): how much one bounce adds;
* restarted from the ground truth: each model rolled out for ``RESTART_STEPS`` steps from the ground truth's state
  10 steps before a rollout's first bounce, and from its state ``RESTART_STEPS + 15`` steps before it (a stretch
  of the same rollout without a bounce): the error that a bounce itself causes, free of the drift before it;
* with ``--one-step-dataset``, each model's one-step error (teacher-forced: the dataset's own history, the last
  position of every window) split by the transition's phase against the rail: free (inside the limits at both
  ends), onset (crossing into the stop), inside (beyond a limit at both ends: on the spring) and exit; which
  frames of a bounce the model gets wrong;
* the share of states in a slow bounce (within ``SHALLOW`` m beyond a limit, the cart slower than ``--slow-speed``:
  the bounces of passive motion from the env reset are slow, median speed ~0.7 m/s, and shallow) in the ground
  truth's rollouts and, with ``--datasets``, in each dataset (besides all states beyond a limit, which in the
  release's data are mostly deep, fast bounces).

Writes a JSON, a Markdown table and a PNG.

Example (docs/notebook/accuracy.md, "The rail's end stops"):
    python studies/cartpole_rail/cartpole_rail.py --model-paths pretrained_models/NeRD_models/Cartpole/model.pt \
        --num-rollouts 512 --output studies/cartpole_rail/results/cartpole_rail.json \
        --datasets data/Cartpole_logu/train.hdf5
"""

from pathlib import Path

import numpy as np
import torch

from nerd.checkpoint import checkpoint_label, load_checkpoint
from nerd.cli import add_common_args, check_report_outputs, make_parser, resolve_device, run_main, write_report
from nerd.datasets.hdf5 import load_trajectories
from nerd.datasets.windows import TrajectoryWindows
from nerd.envs import make_env
from nerd.envs.cartpole import RAIL_LIMIT
from nerd.evaluation import initial_state_sampler, rollout, state_errors
from nerd.modes import GROUND_TRUTH, NEURAL
from nerd.neural_environment import NeuralEnvironment

OFFSETS = (-20, -5, 0, 5, 10, 20, 50, 100)
"""Steps relative to the first frame beyond a limit at which the errors are reported."""
METRICS = ("cart_position_error", "pole_angle_error")
SHALLOW = 0.1
"""[m] beyond a rail limit: the depth of a slow bounce (a 0.8 m/s bounce reaches 0.06 m on the 1e4 N/m stop)."""
RESTART_STEPS = 60
"""Length of the rollouts restarted from the ground truth before a bounce."""
_X, _XD = 0, 2  # cart position and velocity in the Cartpole's state (x, θ, ẋ, θ̇)
PHASES = ("free", "onset", "inside", "exit")
"""A transition's phase against the rail, by whether the cart is beyond a limit at its start and at its end."""
_RATE_TARGETS = {"cart velocity change [m/s]": 2, "pole rate change [rad/s]": 3}
"""Columns of the Cartpole's target [Δx, Δθ, Δẋ, Δθ̇] whose one-step errors are reported."""


def rail_errors(model_paths: list[str], num_rollouts: int, horizon: int, seed: int, slow_speed: float,
                device: str) -> dict:
    """Ground truth and each model from the same env-reset states (module docstring); JSON-ready."""
    env = make_env("Cartpole", num_rollouts, device=device)
    initial = initial_state_sampler(env, "task")(num_rollouts, torch.Generator().manual_seed(seed))
    nenv = NeuralEnvironment(env, None, env_mode=GROUND_TRUTH)
    truth = rollout(nenv, initial, horizon, GROUND_TRUTH)
    beyond = truth[1:, :, _X].abs() > RAIL_LIMIT  # (H, N)
    hits = beyond.any(0)
    first = beyond.double().argmax(0)  # index into steps 1..H
    aligned = hits & (first >= 20) & (first < horizon - max(OFFSETS))
    # Restarts: steps 1..H are truth[1:], so truth[1 + first - k] is k steps before the first frame beyond the limit.
    late = hits & (first >= RESTART_STEPS + 15)
    late_ids = late.nonzero()[:, 0]
    restarts = {"across the bounce": truth[1 + first[late] - 10, late_ids],
                "before it": truth[1 + first[late] - RESTART_STEPS - 15, late_ids]}
    restart_env = make_env("Cartpole", len(late_ids), device=device)
    restart_nenv = NeuralEnvironment(restart_env, None, env_mode=GROUND_TRUTH)
    restart_truth = {name: rollout(restart_nenv, start, RESTART_STEPS, GROUND_TRUTH)
                     for name, start in restarts.items()}
    models = {}
    for path in model_paths:
        model_env = NeuralEnvironment.from_checkpoint(env, path, GROUND_TRUTH)
        errors = state_errors(truth[1:], rollout(model_env, initial, horizon, NEURAL)[1:], env)
        restart_model = NeuralEnvironment.from_checkpoint(restart_env, path, GROUND_TRUTH)
        restarted = {name: state_errors(restart_truth[name][-1], rollout(restart_model, start, RESTART_STEPS,
                                                                         NEURAL)[-1], restart_env)
                     for name, start in restarts.items()}
        row = {}
        for name in METRICS:
            per_rollout = errors[name].double().mean(0)
            row[name] = {"all": float(per_rollout.mean()), "reaching a limit": float(per_rollout[hits].mean()),
                         "never reaching one": float(per_rollout[~hits].mean())}
            around = errors[name][:, aligned].double()
            start = first[aligned]
            row[name]["around the first bounce"] = {
                str(k): float(around[start + k, torch.arange(len(start))].mean()) for k in OFFSETS}
            row[name]["restarted"] = {group: float(err[name].double().mean()) for group, err in restarted.items()}
            row[name]["vs step"] = {"reaching a limit": errors[name][:, hits].double().mean(1).tolist(),
                                    "never reaching one": errors[name][:, ~hits].double().mean(1).tolist()}
        models[path] = row
    return {"env_name": "Cartpole", "initial_states": "task", "num_rollouts": num_rollouts, "horizon": horizon,
            "seed": seed, "mass_matrix_refresh": env.mass_matrix_refresh,
            "share_reaching_a_limit": float(hits.double().mean()), "rollouts_aligned": int(aligned.sum()),
            "rollouts_restarted": len(late_ids), "restart_steps": RESTART_STEPS, "slow_speed": slow_speed,
            "ground_truth_coverage": rail_coverage(truth[1:].cpu().numpy(), slow_speed),
            "median_speed_at_first_bounce": float(truth[1:, :, _XD][first[hits], hits.nonzero()[:, 0]].abs().median()),
            "models": models}


def bounce_phase(x_start: torch.Tensor, x_end: torch.Tensor) -> torch.Tensor:
    """Index into :data:`PHASES` of each transition from cart position ``x_start`` to ``x_end`` [m]."""
    beyond_start, beyond_end = x_start.abs() > RAIL_LIMIT, x_end.abs() > RAIL_LIMIT
    return torch.where(beyond_start, torch.where(beyond_end, 2, 3), torch.where(beyond_end, 1, 0))


def one_step_errors(model_paths: list[str], dataset: str, max_trajectories: int, device: str) -> dict:
    """Per model and :data:`PHASES` phase, the mean absolute one-step error of the rate changes over every
    window's last transition of ``dataset`` (its first ``max_trajectories`` trajectories); JSON-ready."""
    models, windows = {}, {}
    for path in model_paths:
        model, signature, payload = load_checkpoint(path, device)
        model.eval()
        key = payload["history_length"], signature.joint_limits, bool(signature.joint_limit_lookahead)
        if key not in windows:
            windows[key] = TrajectoryWindows(dataset, key[0], device, max_trajectories=max_trajectories,
                                             joint_limits=key[1], joint_limit_lookahead=key[2])
        data = windows[key]
        signature.check_compatible(data.signature, what=f"checkpoint {path}")
        errors, phases = [], []
        with torch.no_grad():
            for ids in torch.arange(len(data)).split(8192):
                inputs, target = data.get_batch(ids)
                last = target[:, -1]
                errors.append((model.predict(inputs) - last).abs())
                x = inputs["states"][:, -1, _X]
                phases.append(bounce_phase(x, x + last[:, _X]))
        error, phase = torch.cat(errors).double(), torch.cat(phases)
        row = {}
        for k, name in enumerate(PHASES):
            chosen = phase == k
            row[name] = {"transitions": int(chosen.sum())} | {
                what: float(error[chosen, col].mean()) for what, col in _RATE_TARGETS.items()}
        models[path] = row
    return {"dataset": dataset, "max_trajectories": max_trajectories, "models": models}


def rail_coverage(states: np.ndarray, slow_speed: float) -> dict[str, float]:
    """Share of Cartpole states (..., 4) beyond a rail limit, and in a slow bounce (module docstring)."""
    depth = np.abs(states[..., _X]) - RAIL_LIMIT
    slow = (depth > 0) & (depth < SHALLOW) & (np.abs(states[..., _XD]) < slow_speed)
    return {"beyond a limit": float((depth > 0).mean()), "slow bounce": float(slow.mean())}


def dataset_coverage(paths: list[str], slow_speed: float) -> dict[str, dict[str, float]]:
    """:func:`rail_coverage` of each dataset's states."""
    return {path: rail_coverage(load_trajectories(path, fields=("states",))["states"], slow_speed) for path in paths}


def format_table(results: dict) -> str:
    """Markdown: per model, the errors by group and around the first bounce; then the datasets' coverage."""
    lines = [f"{results['num_rollouts']} rollouts x {results['horizon']} steps from the env reset, seed "
             f"{results['seed']}: {100 * results['share_reaching_a_limit']:.0f} % reach a rail limit (median speed at "
             f"the first bounce {results['median_speed_at_first_bounce']:.2f} m/s); "
             f"{results['rollouts_aligned']} rollouts aligned at their first bounce; {results['rollouts_restarted']} "
             f"restarted from the ground truth for {results['restart_steps']} steps (error at the last step).", "",
             "| model | metric | all | reaching a limit | never reaching one | "
             + " | ".join(f"bounce {k:+d}" for k in OFFSETS) + " | restarted across the bounce | restarted before it |",
             "|---|---|---|---|---|" + "---|" * (len(OFFSETS) + 2)]
    for path, row in results["models"].items():
        for name in METRICS:
            r = row[name]
            around = " | ".join(f"{r['around the first bounce'][str(k)]:.4f}" for k in OFFSETS)
            lines.append(f"| {path} | {name} | {r['all']:.4f} | {r['reaching a limit']:.4f} | "
                         f"{r['never reaching one']:.4f} | {around} | {r['restarted']['across the bounce']:.4f} | "
                         f"{r['restarted']['before it']:.4f} |")
    slow = f"in a slow bounce (< {SHALLOW} m beyond, < {results['slow_speed']} m/s)"
    lines += ["", f"| states | beyond a limit | {slow} |", "|---|---|---|"]
    for path, share in {"the ground truth's rollouts above": results["ground_truth_coverage"],
                        **results.get("datasets", {})}.items():
        lines.append(f"| {path} | {100 * share['beyond a limit']:.2f} % | {100 * share['slow bounce']:.2f} % |")
    if "one_step" in results:
        one = results["one_step"]
        lines += ["", f"One-step errors (mean |prediction - truth| of the last transition of every window) on "
                  f"{one['dataset']} (first {one['max_trajectories']} trajectories), by phase against the rail:", "",
                  "| model | phase | transitions | " + " | ".join(_RATE_TARGETS) + " |",
                  "|---|---|---|" + "---|" * len(_RATE_TARGETS)]
        for path, row in one["models"].items():
            for name in PHASES:
                r = row[name]
                lines.append(f"| {path} | {name} | {r['transitions']} | "
                             + " | ".join(f"{r[what]:.2e}" for what in _RATE_TARGETS) + " |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    """Per metric, the mean error against the step of the two groups, one colour per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 3.6))
    for ax, name in zip(axes, METRICS, strict=True):
        for i, (label, row) in enumerate(results["models"].items()):
            short = checkpoint_label(label)
            for group, style in (("reaching a limit", "-"), ("never reaching one", ":")):
                ax.plot(row[name]["vs step"][group], style, color=f"C{i}", label=f"{short}, {group}")
        ax.set_xlabel("step")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Cartpole from the env reset, zero force ({results['num_rollouts']} rollouts, seed "
                 f"{results['seed']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--model-paths", nargs="+", required=True, help="Cartpole NeRD checkpoints to compare")
    parser.add_argument("--num-rollouts", type=int, default=512)
    parser.add_argument("--horizon", type=int, default=1000)
    parser.add_argument("--datasets", nargs="*", default=[], help="HDF5 datasets whose rail coverage to report")
    parser.add_argument("--one-step-dataset", default=None,
                        help="HDF5 dataset (e.g. --initial-states limits data) for the one-step errors by phase")
    parser.add_argument("--one-step-trajectories", type=int, default=3000,
                        help="trajectories of --one-step-dataset read")
    parser.add_argument("--slow-speed", type=float, default=1.5, help="cart speed of a slow bounce [m/s]")
    parser.add_argument("--output", required=True, help="JSON path; the table (.md) and plot (.png) go beside it")
    add_common_args(parser, seed_default=500)
    args = parser.parse_args()
    if args.horizon <= max(OFFSETS) + 20:
        parser.error(f"--horizon must exceed {max(OFFSETS) + 20}, to align rollouts at their first bounce")
    output, png = check_report_outputs(args.output, args.overwrite, plot=True)
    results = rail_errors(args.model_paths, args.num_rollouts, args.horizon, args.seed, args.slow_speed,
                          resolve_device(args.device))
    results["datasets"] = dataset_coverage(args.datasets, args.slow_speed)
    if args.one_step_dataset:
        results["one_step"] = one_step_errors(args.model_paths, args.one_step_dataset, args.one_step_trajectories,
                                              resolve_device(args.device))
    write_report(output, results, format_table(results))
    plot(results, png)


if __name__ == "__main__":
    run_main(main)
