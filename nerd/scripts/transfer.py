r"""Train a policy in NeRD, refine the model with the policy's ground-truth data, evaluate in both simulators.

Installed as ``nerd-transfer``; ``python train/transfer_loop.py`` runs the same. The loop (rounds of PPO in NeRD,
ground-truth rollouts of the policy, NeRD fine-tunes) is described by one YAML file (``cfg/transfer/``); without
its ``refine`` section it is the faithful recipe. docs/transfer.md has the configs and the results.

Examples:
    # the Ant run task, refined with 10 % ground-truth data (see the config's header for the data it mixes in)
    python train/transfer_loop.py --cfg cfg/transfer/Ant/run_refine_cpu.yaml --logdir runs/transfer/ant_run_refine
    # continue it after an interruption (a finished stage is never run again)
    python train/transfer_loop.py --cfg cfg/transfer/Ant/run_refine_cpu.yaml --logdir runs/transfer/ant_run_refine \
        --resume
"""

from nerd.cli import add_common_args, add_overrides_arg, make_parser, quiet_warp, resolve_device, run_main


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--cfg", required=True,
                        help="transfer-loop config, e.g. cfg/transfer/Cartpole/swingup_refine_cpu.yaml")
    parser.add_argument("--logdir", required=True, help="loop directory (rounds, data, models, evaluation)")
    parser.add_argument("--resume", action="store_true", help="continue the loop in --logdir where it stopped")
    add_overrides_arg(parser, "rounds=4 refine.gt_fraction=0.05")
    add_common_args(parser)
    args = parser.parse_args(argv)

    # Imported after parsing, so that --help and argument errors come without the libraries' start-up time.
    quiet_warp()
    from nerd.rl.transfer import load_transfer_config, run_transfer_loop

    device = resolve_device(args.device)
    cfg = load_transfer_config(args.cfg, args.cfg_overrides)
    run_transfer_loop(cfg, args.logdir, device, args.seed, resume=args.resume, overwrite=args.overwrite)
    print(f"wrote {args.logdir}/eval.json and eval.md")


def cli() -> None:
    """Console-script entry point ``nerd-transfer``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
