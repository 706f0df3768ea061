r"""Generate a trajectory dataset (HDF5) from the ground-truth simulator.

Installed as ``nerd-generate``; ``python generate/generate_dataset.py`` runs the same.

Example:
    python generate/generate_dataset.py --env-name Cartpole --num-transitions 1000000 \
        --trajectory-length 100 --num-envs 2048 --dataset-dir data/Cartpole --dataset-name train.hdf5
"""

from pathlib import Path

from nerd.cli import (
    add_common_args,
    add_mass_matrix_refresh_arg,
    add_robot_variant_arg,
    check_output,
    make_parser,
    resolve_device,
    run_main,
)
from nerd.envs import ENV_NAMES, env_class
from nerd.generation import GenerationConfig, generate_dataset


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--env-name", required=True, help=f"one of {', '.join(ENV_NAMES)}")
    parser.add_argument("--num-transitions", type=int, required=True, help="transitions to write")
    parser.add_argument("--trajectory-length", type=int, default=100, help="steps per trajectory")
    parser.add_argument("--num-envs", type=int, default=2048, help="parallel envs")
    parser.add_argument("--dataset-dir", required=True, help="output directory")
    parser.add_argument("--dataset-name", required=True, help="file name; '.hdf5' is added if it has no suffix")
    parser.add_argument("--passive", action="store_true", help="zero torques instead of random ones")
    parser.add_argument("--contact-config", type=int, default=None, help="fixed pendulum ground configuration (0-6)")
    parser.add_argument("--solver", default=None, help="ground-truth solver (default: featherstone)")
    add_mass_matrix_refresh_arg(parser)
    add_robot_variant_arg(parser)
    parser.add_argument("--compression", default="lzf", choices=["lzf", "gzip", "none"],
                        help="HDF5 compression")
    add_common_args(parser)
    args = parser.parse_args(argv)
    env_class(args.env_name)  # an unknown robot fails here, naming the valid ones

    name = args.dataset_name if Path(args.dataset_name).suffix else args.dataset_name + ".hdf5"
    path = check_output(Path(args.dataset_dir) / name, args.overwrite)
    cfg = GenerationConfig(
        env_name=args.env_name, num_transitions=args.num_transitions, trajectory_length=args.trajectory_length,
        num_envs=args.num_envs, seed=args.seed, passive=args.passive, contact_config=args.contact_config,
        solver=args.solver, mass_matrix_refresh=args.mass_matrix_refresh, robot_variant=args.robot_variant,
        compression=None if args.compression == "none" else args.compression,
    )
    summary = generate_dataset(cfg, path, device=resolve_device(args.device))
    print(f"wrote {summary.path}: {summary.num_trajectories} trajectories, {summary.num_transitions} transitions, "
          f"{summary.num_dropped} dropped, {summary.seconds:.1f} s "
          f"({summary.transitions_per_second:,.0f} transitions/s)")



def cli() -> None:
    """Console-script entry point ``nerd-generate``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
