"""Identify a double pendulum's two link lengths from its joint trajectories: local descent against NeuralSim's
parallel basin hopping, from every cell of a grid of initial guesses (the NeuralSim paper's Fig. 4).

The reference is the contact-free PendulumWithContact (ground configuration 0) with link lengths ``--true`` (the
robot's own are 1.5 m), rolled out torque-free for ``--frames`` frames from ``--trajectories`` initial states of
the data generator's distribution (seed ``--seed``). The loss of a guess is the mean squared joint-angle error
[rad^2] of its rollout against the reference; its gradient comes through Newton's Featherstone on a Warp tape
(:mod:`nerd.diffsim`), each guess one env of a batched rollout. A length changes the link's centre of mass, its
inertia across the link and (link 0) the second pivot, not its mass
(:meth:`nerd.envs.pendulum.PendulumWithContact.link_length_parameters`).

From each grid start, at the same number of batched loss evaluations (``--hops`` x ``--iterations``):

* ``local``: one Adam descent (:func:`nerd.sysid.descend`), the local optimiser;
* ``multistart``: ``--chains`` descents from the start and ``--sigma``-perturbations of it, the best kept (the
  population without hopping: as many rollouts as basin hopping);
* ``basin_hopping``: :func:`nerd.sysid.parallel_basin_hopping` with ``--chains`` chains, restarted around the best
  solution after each of the ``--hops`` hops.

A start succeeds when its final lengths are within ``--tolerance`` m (Euclidean) of the truth. The report (JSON,
Markdown table, PNG of the three grids of final errors):

    python studies/pendulum_sysid/pendulum_sysid.py --output studies/pendulum_sysid/results/pendulum_sysid.json
"""

from __future__ import annotations

import argparse
import time

from nerd.cli import make_parser, run_main, write_study_report
from nerd.errors import UserError

METHODS = ("local", "multistart", "basin_hopping")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The study's options; every default is the recorded run's."""
    parser = make_parser(__doc__)
    parser.add_argument("--true", type=float, nargs=2, default=[1.2, 1.8], metavar=("L0", "L1"),
                        help="the reference's link lengths [m]")
    parser.add_argument("--grid", type=int, default=8, help="initial guesses per length (grid x grid starts)")
    parser.add_argument("--bounds", type=float, nargs=2, default=[0.6, 2.7], metavar=("LOW", "HIGH"),
                        help="the grid's and the search's range of each length [m]")
    parser.add_argument("--frames", type=int, default=60, help="frames of each reference trajectory (60 Hz)")
    parser.add_argument("--trajectories", type=int, default=1, help="reference trajectories (initial states)")
    parser.add_argument("--hops", type=int, default=6, help="basin-hopping rounds")
    parser.add_argument("--iterations", type=int, default=25, help="Adam steps per hop")
    parser.add_argument("--chains", type=int, default=4, help="local optimisers per start (multistart, hopping)")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam's step [m]")
    parser.add_argument("--sigma", type=float, default=0.3, help="perturbation of a restart [m]")
    parser.add_argument("--tolerance", type=float, default=0.05, help="success: final error below this [m]")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="methods to run")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial states and the perturbations")
    parser.add_argument("--output", default="outputs/pendulum_sysid.json", help="the report (.md, .png beside it)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    args = parser.parse_args(argv)
    low, high = args.bounds
    if not 0.0 < low < high:
        raise UserError(f"--bounds must satisfy 0 < LOW < HIGH, got {low} {high}")
    if not all(low <= v <= high for v in args.true):
        raise UserError(f"--true {args.true} lies outside --bounds {low} {high}")
    for name in ("grid", "frames", "trajectories", "hops", "iterations", "chains"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be at least 1")
    return args


def run_study(args: argparse.Namespace) -> dict:
    """Fit from every grid start with each method; returns the report's results."""
    import torch

    from nerd.diffsim import GroundTruthRollout
    from nerd.envs import make_env
    from nerd.envs.pendulum import PendulumWithContact
    from nerd.sysid import descend, parallel_basin_hopping

    r, frames = args.trajectories, args.frames
    initial = make_env("PendulumWithContact", r, contact_config=0, use_graph=False).sample_initial_states(
        r, torch.Generator().manual_seed(args.seed))
    true = torch.tensor([args.true])
    sims: dict[int, GroundTruthRollout] = {}

    def rollout(lengths: torch.Tensor) -> torch.Tensor:
        """Joint angles (B, R, H, 2) of B guesses, each from the R initial states."""
        b = lengths.shape[0]
        if b * r not in sims:
            sims[b * r] = GroundTruthRollout(make_env("PendulumWithContact", b * r, contact_config=0,
                                                      use_graph=False))
        sim = sims[b * r]
        params = PendulumWithContact.link_length_parameters(lengths.repeat_interleave(r, dim=0), sim.parameter)
        states = sim(initial.repeat(b, 1), torch.zeros(b * r, frames, 2), params)
        return states[..., :2].reshape(b, r, frames, 2)

    with torch.no_grad():
        reference = rollout(true)

    def loss_fn(lengths: torch.Tensor) -> torch.Tensor:
        return ((rollout(lengths) - reference) ** 2).mean(dim=(1, 2, 3))

    low, high = torch.tensor(args.bounds[0]), torch.tensor(args.bounds[1])
    axis = torch.linspace(args.bounds[0], args.bounds[1], args.grid)
    starts = torch.cartesian_prod(axis, axis)  # (G, 2): l0 slow, l1 fast
    total = args.hops * args.iterations
    results = {}
    for method in args.methods:
        generator = torch.Generator().manual_seed(args.seed)
        t0 = time.time()
        if method == "local":
            fit = descend(loss_fn, starts, total, args.lr, low, high)
            rows = 1
        elif method == "multistart":
            fit = parallel_basin_hopping(loss_fn, starts, args.chains, 1, total, args.lr, args.sigma, low, high,
                                         generator)
            rows = args.chains
        else:
            fit = parallel_basin_hopping(loss_fn, starts, args.chains, args.hops, args.iterations, args.lr,
                                         args.sigma, low, high, generator)
            rows = args.chains
        error = (fit.params - true).norm(dim=1)
        results[method] = {
            "success_rate": float((error < args.tolerance).double().mean()),
            "median_error_m": float(error.median()),
            "evaluations": fit.evaluations,
            "rollouts_per_start": fit.evaluations * rows,
            "seconds": time.time() - t0,
            "final_lengths": fit.params.tolist(),
            "final_loss": fit.loss.tolist(),
            "final_error_m": error.tolist(),
        }
        print(f"{method}: {results[method]['success_rate']:.0%} of {len(starts)} starts within "
              f"{args.tolerance} m ({results[method]['seconds']:.0f} s)")
    return {"config": {k: v for k, v in vars(args).items() if k not in ("output", "overwrite")},
            "starts": starts.tolist(), "results": results}


def table(report: dict) -> str:
    """The report's Markdown table."""
    c = report["config"]
    lines = [f"Pendulum link lengths {c['true']} m from a {c['grid']}x{c['grid']} grid of guesses in {c['bounds']} m, "
             f"{c['trajectories']} trajectory(ies) x {c['frames']} frames; {c['hops']} hops x {c['iterations']} Adam "
             f"steps (local: {c['hops'] * c['iterations']} steps), {c['chains']} chains; success: error < "
             f"{c['tolerance']} m.", "",
             "| method | success | median final error [m] | batched evaluations | rollouts per start | seconds |",
             "|---|---|---|---|---|---|"]
    for method, r in report["results"].items():
        lines.append(f"| {method} | {r['success_rate']:.0%} | {r['median_error_m']:.3g} | {r['evaluations']} | "
                     f"{r['rollouts_per_start']} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict):
    """The figure: one panel per method, each grid cell (a start) coloured by its final error, the truth a star."""
    import matplotlib.pyplot as plt
    import numpy as np

    c, results = report["config"], report["results"]
    n = c["grid"]
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 4), squeeze=False)
    top = max(1.0, *(max(r["final_error_m"]) for r in results.values()))  # one colour scale for every panel
    for ax, (method, r) in zip(axes[0], results.items(), strict=True):
        error = np.array(r["final_error_m"]).reshape(n, n)  # [l0 index, l1 index]
        image = ax.imshow(error.T, origin="lower", extent=(*c["bounds"], *c["bounds"]), cmap="viridis_r",
                          vmin=0.0, vmax=top)
        ax.plot(*c["true"], marker="*", color="red", markersize=14)
        ax.set_title(f"{method}: {r['success_rate']:.0%} within {c['tolerance']} m")
        ax.set_xlabel("initial link-0 length [m]")
        ax.set_ylabel("initial link-1 length [m]")
        fig.colorbar(image, ax=ax, label="final error [m]")
    return fig


def main() -> None:
    """Parse the command line, run the study, write the report."""
    write_study_report(parse_args(), run_study, table, plot)


if __name__ == "__main__":
    run_main(main)
