r"""Is ANYmal's data-generation PD law stable? Joint speeds under fixed gains, in each robot variant.

The release's ANYmal sampler drives the robot with random joint-position actions through a PD law whose gains are
drawn from Kp ~ U[30, 200], Kd ~ U[0, 1], the torque computed once per frame (1/60 s) and held over its substeps.
A held PD torque is a sampled-data controller: with stiff gains, little damping and a light joint it oscillates
and grows. This script runs the data sampler's initial states and random actions for ``--frames`` frames under
each fixed (Kp, Kd) pair and reports, per pair and variant, the median over envs of each env's largest joint speed,
the share of envs that exceeded ``--limit`` rad/s, and the frame at which a rollout became non-finite (if one did).
Then the same for each data-generation gain box (``--pd-gains``: gains redrawn per env and frame, as generation
does): the release's and our ``damped`` one.

Writes a JSON and prints a Markdown table.

Example (the numbers in docs/anymal.md):
    python studies/anymal_pd_stability/anymal_pd_stability.py \
        --output studies/anymal_pd_stability/results/anymal_pd_stability.json
"""

import json

import torch

from nerd.cli import add_common_args, check_json_output, make_parser, resolve_device, run_main
from nerd.envs import make_env
from nerd.envs.anymal import DATA_PD_GAINS
from nerd.errors import UserError
from nerd.run_dir import write_text_atomic

GAINS = ((30, 0.0), (30, 1.0), (60, 0.0), (60, 1.0), (85, 2.0), (100, 1.0), (120, 0.5), (200, 0.0), (200, 1.0))
"""(Kp, Kd) pairs: the corners of the release's sampling box, the RL gains (85, 2) and points between."""

def max_joint_speeds(variant: str, gains: tuple[float, float] | str, num_envs: int, frames: int, seed: int,
                     device: str) -> tuple[torch.Tensor, int | None]:
    """Each env's largest |q̇| over the rollout under fixed (Kp, Kd) or a gain box redrawn every frame, and the
    frame at which the rollout became non-finite (or None)."""
    env = make_env("Anymal", num_envs, device=device, robot_variant=variant)
    gen = torch.Generator().manual_seed(seed)
    env.reset(states=env.sample_initial_states(num_envs, gen))
    if not isinstance(gains, str):
        env.set_pd_gains(*gains)
    joint_velocities = slice(env.dof_q + env.act_dof_indices[0], env.state_dim)  # after the base twist
    largest = torch.zeros(num_envs)
    for frame in range(frames):
        if isinstance(gains, str):
            env.randomize_controller(gen, gains)
        try:
            env.step(env.sample_random_actions(num_envs, gen))
        except UserError:  # the PD torques of a blown-up state are no longer finite
            return largest, frame
        speeds = env.get_states()[:, joint_velocities].abs().amax(dim=1).cpu()
        if not torch.isfinite(speeds).all():
            return largest, frame
        largest = torch.maximum(largest, speeds)
    return largest, None


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("--variants", nargs="+", default=["physical", "release"], help="robot variants")
    parser.add_argument("--num-envs", type=int, default=64, help="envs per (Kp, Kd) pair")
    parser.add_argument("--frames", type=int, default=100, help="frames per rollout (a dataset trajectory's length)")
    parser.add_argument("--limit", type=float, default=100.0, help="joint speed counted as blown up [rad/s]")
    parser.add_argument("--output", default=None, help="results JSON")
    add_common_args(parser)
    args = parser.parse_args()
    device = resolve_device(args.device)
    output = check_json_output(args.output, args.overwrite, None)[0] if args.output else None
    rows = []
    for variant in args.variants:
        for gains in (*GAINS, *DATA_PD_GAINS):
            largest, blown_at = max_joint_speeds(variant, gains, args.num_envs, args.frames, args.seed, device)
            if isinstance(gains, str):  # a box: its ranges, named
                (kp_low, kp_high), (kd_low, kd_high) = DATA_PD_GAINS[gains]
                kp, kd = f"{gains} box: U[{kp_low:g}, {kp_high:g}]", f"U[{kd_low:g}, {kd_high:g}]"
            else:
                kp, kd = gains
            rows.append({"variant": variant, "kp": kp, "kd": kd,
                         "median_max_joint_speed": None if blown_at is not None else float(largest.median()),
                         "share_above_limit": None if blown_at is not None else float((largest > args.limit)
                                                                                        .float().mean()),
                         "non_finite_at_frame": blown_at})
    lines = [f"| variant | Kp | Kd | median of max \\|q̇\\| [rad/s] | share of envs above {args.limit:g} rad/s |",
             "|---|---|---|---|---|"]
    for r in rows:
        if r["non_finite_at_frame"] is not None:
            lines.append(f"| {r['variant']} | {r['kp']} | {r['kd']} | non-finite at frame {r['non_finite_at_frame']}"
                         " | – |")
        else:
            lines.append(f"| {r['variant']} | {r['kp']} | {r['kd']} | {r['median_max_joint_speed']:.1f} | "
                         f"{r['share_above_limit']:.2f} |")
    print("\n".join(lines))
    if output:
        write_text_atomic(output, json.dumps({"num_envs": args.num_envs, "frames": args.frames, "seed": args.seed,
                                              "limit": args.limit, "rows": rows}, indent=2))
        print(f"wrote {output}")


if __name__ == "__main__":
    run_main(main)
