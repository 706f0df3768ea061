"""Evaluate several policies in several simulators and write one table (the paper's Table 1).

Installed as ``nerd-batch-eval``; ``python eval/batch_eval_policy.py`` runs the same.

Example:
    python eval/batch_eval_policy.py --eval-cfg cfg/eval/cartpole_swingup.yaml --output outputs/cartpole_rl.json
"""

from pathlib import Path

from nerd.cli import add_common_args, check_report_outputs, make_parser, quiet_warp, resolve_device, run_main
from nerd.config import load_config


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--eval-cfg", required=True, help="evaluation config, e.g. cfg/eval/cartpole_swingup.yaml")
    parser.add_argument("--output", default=None,
                        help="table JSON (a Markdown copy and a PNG of the reward at each step are written beside it)")
    parser.add_argument("--cfg-overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides, e.g. num_games=64")
    add_common_args(parser, seed_default=None)
    args = parser.parse_args(argv)
    output = check_report_outputs(args.output, args.overwrite, plot=True)[0] if args.output else None
    if not Path(args.eval_cfg).is_file():
        raise FileNotFoundError(f"config file not found: {args.eval_cfg}")

    # The engine is imported after the checks above, so that --help and input errors come at once.
    device = resolve_device(args.device)
    quiet_warp()
    from nerd.rl.batch_eval import PolicyEvalConfig, batch_evaluate, format_markdown, write_table

    cfg = load_config(args.eval_cfg, PolicyEvalConfig, args.cfg_overrides)
    table = batch_evaluate(cfg, device)
    print(format_markdown(table))
    if output is not None:
        md = write_table(table, output, overwrite=args.overwrite)
        print(f"wrote {output}, {md} and {output.with_suffix('.png')}")


def cli() -> None:
    """Console-script entry point ``nerd-batch-eval``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
