r"""Evaluate passive motion of NeRD (or the ground truth) against the ground-truth simulator.

Installed as ``nerd-eval``; ``python eval/eval_passive_motion.py`` runs the same.

Example:
    python eval/eval_passive_motion.py --env-name Cartpole \
        --model-path pretrained_models/NeRD_models/Cartpole/model.pt --env-mode neural \
        --num-envs 2048 --num-rollouts 2048 --rollout-horizon 1000 --seed 500 --output outputs/cartpole_passive.json
    # the same model next to the ground truth, from one initial state, as an off-screen video
    python eval/eval_passive_motion.py --env-name Cartpole \
        --model-path pretrained_models/NeRD_models/Cartpole/model.pt --rollout-horizon 300 \
        --video outputs/cartpole.gif

With --viewer or --video the script shows one rollout (ground truth blue, NeRD orange) instead of evaluating.
Several --model-path checkpoints of one robot step as an ensemble (their mean prediction; our option).
"""

from nerd.cli import (
    add_common_args,
    add_control_mode_arg,
    add_mass_matrix_refresh_arg,
    add_robot_variant_arg,
    add_viewer_args,
    check_json_output,
    check_viewer_args,
    make_parser,
    quiet_warp,
    resolve_device,
    run_main,
    viewing_requested,
)
from nerd.errors import UserError
from nerd.modes import ENV_MODES, ENV_NAMES, INITIAL_STATES, NEURAL, check_env_name


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--env-name", required=True, help=f"one of {', '.join(ENV_NAMES)}")
    parser.add_argument("--model-path", nargs="+", default=None,
                        help="NeRD checkpoint (needed for --env-mode neural); several: an ensemble that steps with "
                             "their mean prediction (our option, K network calls per step)")
    parser.add_argument("--env-mode", choices=ENV_MODES, default=NEURAL,
                        help="simulator compared with the ground truth")
    parser.add_argument("--num-envs", type=int, default=2048, help="parallel envs (rollouts per batch)")
    parser.add_argument("--num-rollouts", type=int, default=2048, help="trajectories evaluated")
    parser.add_argument("--rollout-horizon", type=int, default=100, help="steps per trajectory")
    parser.add_argument("--contact-config", type=int, nargs="+", default=None,
                        help="pendulum ground configuration(s) 0-6; several give one table over them")
    parser.add_argument("--initial-states", choices=INITIAL_STATES, default=INITIAL_STATES[0],
                        help="'task': the robot's random reset, which the release's passive evaluation starts from "
                             "(default); 'data': the data-generation sampler's much wider ranges; 'limits' (Cartpole): "
                             "starts near a rail stop, moving slowly into it")
    add_mass_matrix_refresh_arg(parser)
    add_robot_variant_arg(parser)
    add_control_mode_arg(parser)
    parser.add_argument("--evaluated-robot-variant", default=None,
                        help="with --env-mode ground-truth: evaluate this variant's ground truth against "
                             "--robot-variant's (e.g. the mismatched CubeToss 'sim' simulator against 'real')")
    parser.add_argument("--output", default=None, help="results JSON (a PNG of error vs step is written beside it)")
    parser.add_argument("--compile-model", action="store_true",
                        help="torch.compile the NeRD model's per-step prediction (faster after ~1 min of compiling)")
    parser.add_argument("--capture-frame", action="store_true",
                        help="our option, for GPUs: replay each neural frame as one CUDA graph (on a CPU the same code "
                             "runs uncaptured); a divergence is then reported up to 16 frames late")
    parser.add_argument("--mirror", action="store_true",
                        help="our option (Cartpole): average each model's prediction with its prediction for the "
                             "robot's mirror image (twice the network calls)")
    parser.add_argument("--data-margin", type=float, default=0.1,
                        help="count the steps whose inputs lie beyond the model's training data by more than this "
                             "fraction of each input's range (models that keep their range)")
    parser.add_argument("--strict-data-range", action="store_true",
                        help="stop with an error at the first step beyond the training data (with --data-margin)")
    add_common_args(parser, seed_default=500)
    add_viewer_args(parser)
    args = parser.parse_args(argv)
    check_env_name(args.env_name)
    if args.env_mode == NEURAL and args.model_path is None:
        raise UserError("--env-mode neural needs --model-path")
    if args.model_path is not None and len(args.model_path) == 1:
        args.model_path = args.model_path[0]
    configs = args.contact_config or [None]
    viewing = viewing_requested(args)
    output, png = None, None
    if viewing:
        check_viewer_args(args)
        if args.output is not None or len(configs) > 1:
            raise UserError("--viewer/--video show one rollout: drop --output and give at most one --contact-config")
    elif args.output:
        output, png = check_json_output(args.output, args.overwrite, ".png" if len(configs) == 1 else None)

    # The engine is imported after the checks above, so that --help and input errors come at once.
    quiet_warp()
    from nerd.evaluation import evaluate_passive, format_config_table, format_results, write_results
    from nerd.viewer import show_passive

    if viewing:
        shown = show_passive(args.env_name, args.model_path, args.env_mode, args.rollout_horizon, args.seed,
                             configs[0], resolve_device(args.device),
                             initial_states=args.initial_states, mass_matrix_refresh=args.mass_matrix_refresh,
                             robot_variant=args.robot_variant, control_mode=args.control_mode, mirror=args.mirror,
                             viewer=args.viewer, output_path=args.output_path, video=args.video,
                             video_size=args.video_size)
        wrote = f"; wrote {shown['path']}" if shown["path"] else ""
        print(f"{shown['frames']} frames in {shown['seconds']:.1f} s{wrote}")
        return

    runs = [
        evaluate_passive(args.env_name, args.model_path, args.env_mode, args.num_envs, args.num_rollouts,
                         args.rollout_horizon, args.seed, config, resolve_device(args.device),
                         initial_states=args.initial_states, mass_matrix_refresh=args.mass_matrix_refresh,
                         robot_variant=args.robot_variant, control_mode=args.control_mode,
                         compile_model=args.compile_model, evaluated_robot_variant=args.evaluated_robot_variant,
                         data_margin=args.data_margin, strict_data_range=args.strict_data_range,
                         mirror=args.mirror, capture_frame=args.capture_frame)
        for config in configs
    ]
    for results in runs:
        print(format_results(results))
    if len(runs) > 1:
        print(format_config_table(runs))
    if output:
        results = runs[0] if len(runs) == 1 else {"contact_configs": {str(r["contact_config"]): r for r in runs}}
        write_results(results, output, png, overwrite=args.overwrite)
        print(f"wrote {output}" + (f" and {png}" if png else ""))


def cli() -> None:
    """Console-script entry point ``nerd-eval``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
