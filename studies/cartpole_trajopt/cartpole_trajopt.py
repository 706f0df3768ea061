"""Gradient-based control: an open-loop Cartpole swing-up optimised through NeRD and through the differentiable
ground truth, each plan then played in both simulators (NeuralSim's use of simulator gradients, on NeRD).

From ``--num-starts`` initial states of the swing-up task's reset (seed ``--seed``), Adam finds one action sequence
of ``--horizon`` frames per start (:func:`nerd.rl.trajopt.optimise_actions`: actions tanh(u), the summed task
reward as objective, built front to back in windows of ``--window`` frames: through the whole 300 frames at once the
chaotic pole's gradient makes the ascent fail) through

* ``neural``: the NeRD model ``--nerd-model`` (torch autograd through :func:`nerd.diffsim.rollout_neural`);
* ``ground-truth``: Newton's Featherstone on a Warp tape (:class:`nerd.diffsim.GroundTruthRollout`).

Both plans, and doing nothing (zero actions), are then played in both simulators and scored as the RL environment
scores an episode (rewards up to the first terminating state, :func:`nerd.rl.trajopt.episode_return`). The gap is
(NeRD - ground truth) / |ground truth| of the same plan, as in the paper's Table 1. Writes the JSON, a Markdown
table and a PNG (objective per iteration; the pole angle of each plan in the ground truth):

    python studies/cartpole_trajopt/cartpole_trajopt.py --output studies/cartpole_trajopt/results/cartpole_trajopt.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from nerd.cli import make_parser, run_main, write_study_report
from nerd.errors import UserError
from nerd.modes import GROUND_TRUTH, NEURAL

SIMULATORS = (NEURAL, GROUND_TRUTH)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The study's options; every default is the recorded run's."""
    parser = make_parser(__doc__)
    parser.add_argument("--nerd-model", default="pretrained_models/NeRD_models/Cartpole/model.pt",
                        help="NeRD checkpoint of the Cartpole")
    parser.add_argument("--num-starts", type=int, default=8, help="initial states (one plan each)")
    parser.add_argument("--horizon", type=int, default=300, help="frames of a plan (the task's episode: 300)")
    parser.add_argument("--window", type=int, default=60,
                        help="frames optimised at a time, the plan built front to back (0: the whole horizon at once)")
    parser.add_argument("--iterations", type=int, default=10, help="Adam steps per window")
    parser.add_argument("--lr", type=float, default=0.1, help="Adam's step on u (actions tanh(u))")
    parser.add_argument("--simulators", nargs="+", choices=SIMULATORS, default=list(SIMULATORS),
                        help="simulators to optimise through")
    parser.add_argument("--seed", type=int, default=500, help="seed of the initial states")
    parser.add_argument("--output", default="outputs/cartpole_trajopt.json", help="the report (.md, .png beside it)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    args = parser.parse_args(argv)
    if args.window < 0:
        raise UserError("--window must be 0 (the whole horizon) or positive")
    for name in ("num_starts", "horizon", "iterations"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if not Path(args.nerd_model).is_file():
        raise UserError(f"--nerd-model {args.nerd_model}: no such file")
    return args


def run_study(args: argparse.Namespace) -> dict:
    """Optimise through each simulator, play every plan in both; returns the report's results."""
    import torch

    from nerd.diffsim import GroundTruthRollout, rollout_neural
    from nerd.envs import make_env
    from nerd.rl.tasks import make_task
    from nerd.rl.trajopt import episode_return, joint_torques, optimise_actions

    n, h = args.num_starts, args.horizon
    env = make_env("Cartpole", n, use_graph=False)
    task = make_task("Cartpole", "swingup", n)
    initial = env.sample_reset_states(n, torch.Generator().manual_seed(args.seed))
    ground_truth = GroundTruthRollout(env)
    rollouts = {NEURAL: lambda x, tq: rollout_neural(args.nerd_model, env, x, tq), GROUND_TRUTH: ground_truth}

    def play(actions: torch.Tensor) -> dict:
        """Returns (and the ground truth's pole angles) of one plan in both simulators."""
        with torch.no_grad():
            states = {sim: rollouts[sim](initial, joint_torques(env, actions)) for sim in SIMULATORS}
        returns = {sim: episode_return(task, states[sim], actions) for sim in SIMULATORS}
        gt, nerd = float(returns[GROUND_TRUTH].mean()), float(returns[NEURAL].mean())
        return {GROUND_TRUTH: gt, NEURAL: nerd, "relative_gap": (nerd - gt) / abs(gt),
                "per_start": {sim: r.tolist() for sim, r in returns.items()},
                "ground_truth_pole_angle": states[GROUND_TRUTH][..., 1].tolist()}

    plans = {"zero actions": {"played": play(torch.zeros(n, h, env.action_dim))}}
    for sim in args.simulators:
        print(f"optimising through {sim}")
        plan = optimise_actions(rollouts[sim], env, task, initial, h, args.iterations, args.lr,
                                window=args.window or None, progress=True)
        plans[f"optimised in {sim}"] = {"seconds": plan.seconds, "history": plan.history,
                                        "objective": float(plan.returns.mean()), "played": play(plan.actions),
                                        "actions": plan.actions.squeeze(-1).tolist()}
    return {"config": {k: v for k, v in vars(args).items() if k not in ("output", "overwrite")},
            "initial_states": initial.tolist(), "plans": plans}


def table(report: dict) -> str:
    """The report's Markdown table."""
    c = report["config"]
    lines = [f"Cartpole swing-up, {c['num_starts']} starts of the task's reset (seed {c['seed']}), open-loop plans of "
             f"{c['horizon']} frames, {c['iterations']} Adam steps per window of {c.get('window') or c['horizon']} "
             "frames; returns up to the first terminating state.", "",
             "| plan | return in the ground truth | return in NeRD | gap | optimisation wall time [s] |",
             "|---|---|---|---|---|"]
    for name, plan in report["plans"].items():
        p = plan["played"]
        seconds = f"{plan['seconds']:.0f}" if "seconds" in plan else "–"
        lines.append(f"| {name} | {p[GROUND_TRUTH]:.1f} | {p[NEURAL]:.1f} | {100 * p['relative_gap']:+.1f} % | "
                     f"{seconds} |")
    return "\n".join(lines) + "\n"


def plot(report: dict):
    """The figure: objective per iteration; the pole angle of the first start under each plan, in the ground truth."""
    import math

    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, plan in report["plans"].items():
        if "history" in plan:
            left.plot(plan["history"], label=name)
        angle = plan["played"]["ground_truth_pole_angle"][0]
        right.plot([(a + math.pi) % (2 * math.pi) - math.pi for a in angle], label=name)
    left.set_xlabel("iteration (all windows)")
    left.set_ylabel("mean summed reward of the plan so far")
    left.legend()
    right.set_xlabel("frame (60 Hz)")
    right.set_ylabel("pole angle in the ground truth, start 0 [rad]")
    right.legend()
    return fig


def main() -> None:
    """Parse the command line, run the study, write the report."""
    write_study_report(parse_args(), run_study, table, plot)


if __name__ == "__main__":
    run_main(main)
