r"""The ground truth against itself: how far two rollouts drift apart from initial states a tiny distance apart.

A learned simulator makes a small error at every step; the ground truth's own sensitivity to such errors is a floor
under the long-horizon error any model can reach. This script rolls out the analytical simulator twice from the
same initial states, once exactly and once with every state coordinate perturbed by ``eps * N(0, 1)``, with zero
actions, and reports the passive metrics of the evaluation (mean over steps 1..h and rollouts, h in
:data:`nerd.evaluation.REPORT_HORIZONS`) between the two, for each ``eps`` and initial-state distribution (the
release's data sampler, ``data``, and the task reset, ``task``).

Writes a JSON (every number, and the error against the step), a Markdown table and a PNG.

Example (the numbers in docs/notebook/accuracy.md):
    python studies/gt_sensitivity/gt_sensitivity.py --env-name Cartpole --num-rollouts 512 --horizon 1000 \
        --output studies/gt_sensitivity/results/gt_sensitivity_cartpole.json
"""

from pathlib import Path

import torch
from tqdm import tqdm

from nerd.cli import (
    add_common_args,
    add_mass_matrix_refresh_arg,
    check_report_outputs,
    make_parser,
    resolve_device,
    run_main,
    write_report,
)
from nerd.envs import ENV_NAMES, make_env
from nerd.evaluation import INITIAL_STATES, REPORT_HORIZONS, initial_state_sampler, metric_units, state_errors


def sensitivity(env_name: str, num_rollouts: int, horizon: int, epsilons: list[float], distributions: list[str],
                seed: int, device: str, mass_matrix_refresh: str | None = None,
                contact_config: int | None = None) -> dict:
    """Errors between exact and perturbed ground-truth rollouts, per distribution and ``eps`` (module docstring)."""
    env = make_env(env_name, 2 * num_rollouts, device=device, mass_matrix_refresh=mass_matrix_refresh,
                   contact_config=contact_config)
    horizons = sorted({h for h in REPORT_HORIZONS if h < horizon} | {horizon})
    generator = torch.Generator().manual_seed(seed)
    actions = torch.zeros(2 * num_rollouts, env.action_dim, device=env.torch_device)
    rows = []
    bar = tqdm(total=len(distributions) * len(epsilons) * horizon, desc=f"{env_name} ground truth vs itself",
               unit="step", mininterval=1.0)
    for distribution in distributions:
        sample = initial_state_sampler(env, distribution)
        for eps in epsilons:
            exact = sample(num_rollouts, generator)
            # A unit quaternion stays one after the perturbation only to first order; the engine normalises it.
            perturbed = exact + eps * torch.randn(exact.shape, generator=generator).to(exact.device)
            env.reset(states=torch.cat([exact, perturbed]))
            per_step: dict[str, list[float]] = {}
            for _ in range(horizon):
                env.step(actions)
                states = env.get_states()
                errors = state_errors(states[:num_rollouts], states[num_rollouts:], env)
                for name, value in errors.items():
                    if name != "per_dof":
                        per_step.setdefault(name, []).append(float(value.double().mean()))
                bar.update()
            rows.append({
                "initial_states": distribution,
                "eps": eps,
                "metrics_by_horizon": {str(h): {name: sum(v[:h]) / h for name, v in per_step.items()}
                                       for h in horizons},
                "error_vs_step": per_step,
            })
    bar.close()
    return {"env_name": env_name, "num_rollouts": num_rollouts, "horizon": horizon, "seed": seed,
            "contact_config": contact_config,
            "mass_matrix_refresh": env.mass_matrix_refresh, "contact_friction": env.contact_friction,
            "metric_units": metric_units(env),
            "rows": rows}


def format_table(results: dict) -> str:
    """Markdown: one row per distribution and eps, one column per metric and horizon."""
    names = list(results["rows"][0]["error_vs_step"])
    horizons = list(results["rows"][0]["metrics_by_horizon"])
    header = ["initial states", "eps"] + [f"{n} H={h}" for h in horizons for n in names]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for row in results["rows"]:
        cells = [row["initial_states"], f"{row['eps']:g}"]
        cells += [f"{row['metrics_by_horizon'][h][n]:.4f}" for h in horizons for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    """Each metric against the step, one curve per distribution and eps (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["rows"][0]["error_vs_step"])
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for row in results["rows"]:
            values = row["error_vs_step"][name]
            style = "-" if row["initial_states"] == "data" else "--"
            ax.semilogy(range(1, len(values) + 1), [max(v, 1e-12) for v in values], style,
                        label=f"{row['initial_states']}, eps {row['eps']:g}")
        ax.set_xlabel("step")
        ax.set_ylabel(f"{name} [{results['metric_units'][name]}]")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{results['env_name']}: ground truth vs itself from initial states perturbed by eps "
                 f"({results['num_rollouts']} rollouts; solid: data sampler, dashed: task reset)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--env-name", required=True, help=f"one of {', '.join(ENV_NAMES)}")
    parser.add_argument("--num-rollouts", type=int, default=512)
    parser.add_argument("--horizon", type=int, default=1000)
    parser.add_argument("--eps", type=float, nargs="+", default=[1e-7, 1e-6, 1e-4, 1e-2],
                        help="perturbation scales (std of the noise added to every state coordinate)")
    parser.add_argument("--initial-states", nargs="+", default=["task", "data"], choices=INITIAL_STATES)
    parser.add_argument("--output", required=True, help="JSON path; the table (.md) and plot (.png) go beside it")
    parser.add_argument("--contact-config", type=int, default=None, help="fixed pendulum ground configuration (0-6)")
    add_mass_matrix_refresh_arg(parser)
    add_common_args(parser, seed_default=500)
    args = parser.parse_args()
    output, png = check_report_outputs(args.output, args.overwrite, plot=True)
    results = sensitivity(args.env_name, args.num_rollouts, args.horizon, args.eps, args.initial_states, args.seed,
                          resolve_device(args.device), args.mass_matrix_refresh, args.contact_config)
    write_report(output, results, format_table(results))
    plot(results, png)


if __name__ == "__main__":
    run_main(main)
