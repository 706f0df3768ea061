r"""Generate a trajectory dataset (HDF5) from the ground-truth simulator.

Installed as ``nerd-generate``; ``python generate/generate_dataset.py`` runs the same.

Example:
    python generate/generate_dataset.py --env-name Cartpole --num-transitions 1000000 \
        --trajectory-length 100 --num-envs 2048 --dataset-dir data/Cartpole --dataset-name train.hdf5
    # sharded on K processes: rank r writes data/Cartpole/train/part-<r>-of-<K>.hdf5 with its share of the
    # transitions and its own seed; training reads the directory as one dataset (dataset.train: data/Cartpole/train)
    torchrun --nproc_per_node=4 generate/generate_dataset.py --env-name Cartpole --num-transitions 4000000 \
        --dataset-dir data/Cartpole --dataset-name train.hdf5
"""

from pathlib import Path

from nerd.cli import (
    add_common_args,
    add_control_mode_arg,
    add_mass_matrix_refresh_arg,
    add_robot_variant_arg,
    check_output,
    make_parser,
    quiet_warp,
    resolve_device,
    run_main,
)
from nerd.distributed import device_for_rank, rank_from_env
from nerd.errors import UserError
from nerd.modes import ENV_NAMES, INITIAL_STATES, SOLVERS, TORQUE_SCALES, check_env_name

SHARD_SEED_STRIDE = 1_000_003
"""Under torchrun rank r generates with seed ``--seed + r * SHARD_SEED_STRIDE`` (distinct streams per part)."""


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
    parser.add_argument("--solver", default=None, choices=SOLVERS,
                        help="ground-truth solver (default: featherstone, the paper's; xpbd is experimental, "
                        "validated on the Cartpole only; mujoco needs the MuJoCo Warp backend)")
    add_mass_matrix_refresh_arg(parser)
    add_robot_variant_arg(parser)
    add_control_mode_arg(parser)
    parser.add_argument("--pd-gains", default=None,
                        help="PD gain box of robots whose data goes through a PD law (Anymal): 'release' (default) "
                             "or 'damped' (ours, stable on the physical robot; docs/anymal.md)")
    parser.add_argument("--torque-scale", default="full", choices=list(TORQUE_SCALES),
                        help="random torques: white noise over the robot's torque box ('full', the release's), over "
                             "a box shrunk per trajectory by 10^U[-2, 0] ('log-uniform', ours) or doubled and clipped "
                             "to the box ('saturating', ours); their effects: docs/findings.md")
    parser.add_argument("--torque-hold-frames", type=int, default=1,
                        help="hold each random torque for a mean time drawn log-uniformly in [1, this] frames per "
                             "trajectory (ours); 1 redraws every frame (white noise, the release's)")
    parser.add_argument("--through-controller", action="store_true",
                        help="draw the noise as actions in [-1, 1] and pass them through the robot's controller "
                             "(--control-mode; Franka position: the PD law), ours; --torque-scale and "
                             "--torque-hold-frames act on the actions")
    parser.add_argument("--initial-states", default="data", choices=sorted(INITIAL_STATES),
                        help="where trajectories start: the robot's data-generation sampler ('data', the release's), "
                             "its task reset ('task', ours) or, for the Cartpole, near a rail stop moving slowly into "
                             "it ('limits', ours); training on a directory of several such files mixes them")
    parser.add_argument("--compression", default="lzf", choices=["lzf", "gzip", "none"],
                        help="HDF5 compression")
    add_common_args(parser)
    args = parser.parse_args(argv)
    check_env_name(args.env_name)

    if Path(args.dataset_name).name != args.dataset_name or args.dataset_name in ("", ".", ".."):
        raise UserError(f"--dataset-name must be a file name, not a path ({args.dataset_name!r}); put folders in "
                        "--dataset-dir")
    name = args.dataset_name if Path(args.dataset_name).suffix else args.dataset_name + ".hdf5"
    rank = rank_from_env()
    num_transitions, seed, path = args.num_transitions, args.seed, Path(args.dataset_dir) / name
    if rank.world_size > 1:
        # No process group is needed: each rank generates its own part independently.
        k, r = rank.world_size, rank.rank
        num_transitions = args.num_transitions * (r + 1) // k - args.num_transitions * r // k
        seed = args.seed + SHARD_SEED_STRIDE * r
        path = path.with_suffix("") / f"part-{r:03d}-of-{k:03d}.hdf5"
    path = check_output(path, args.overwrite)

    # The engine is imported after the checks above, so that --help and input errors come at once.
    quiet_warp()
    from nerd.generation import GenerationConfig, generate_dataset

    cfg = GenerationConfig(
        env_name=args.env_name, num_transitions=num_transitions, trajectory_length=args.trajectory_length,
        num_envs=args.num_envs, seed=seed, passive=args.passive, contact_config=args.contact_config,
        solver=args.solver, mass_matrix_refresh=args.mass_matrix_refresh, robot_variant=args.robot_variant,
        control_mode=args.control_mode, pd_gains=args.pd_gains,
        torque_scale=args.torque_scale, torque_hold_frames=args.torque_hold_frames,
        through_controller=args.through_controller, initial_states=args.initial_states,
        compression=None if args.compression == "none" else args.compression,
    )
    summary = generate_dataset(cfg, path, device=device_for_rank(resolve_device(args.device), rank),
                               progress=rank.is_main, overwrite=args.overwrite)
    print(f"wrote {summary.path}: {summary.num_trajectories} trajectories, {summary.num_transitions} transitions, "
          f"{summary.num_dropped} dropped, {summary.seconds:.1f} s "
          f"({summary.transitions_per_second:,.0f} transitions/s)")


def cli() -> None:
    """Console-script entry point ``nerd-generate``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
