r"""Record in a NeRD checkpoint the range of the data it was trained on (for models saved before they kept it).

Installed as ``nerd-data-range``; ``python train/record_data_range.py`` runs the same. With the range, evaluation and
RL playback report the steps whose inputs leave the training data (``--data-margin``, ``--strict-data-range``).
Name every dataset of the model's lineage (a fine-tune's start data too): the range is their union.

Example:
    python train/record_data_range.py runs/Ant_sat128/nn/best.pt --datasets data/Ant_sat128/train.hdf5 \
        --output runs/Ant_sat128/nn/best_with_range.pt
"""

from nerd.cli import add_common_args, check_output, make_parser, quiet_warp, resolve_device, run_main


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("checkpoint", help="the NeRD checkpoint")
    parser.add_argument("--datasets", nargs="+", required=True, help="its training data (files or directories)")
    parser.add_argument("--output", required=True, help="the checkpoint to write (the input itself with --overwrite)")
    add_common_args(parser, seed_default=None)
    args = parser.parse_args(argv)
    output = check_output(args.output, args.overwrite)

    quiet_warp()
    from nerd.training import record_data_range  # after parsing: --help needs no torch

    low, high = record_data_range(args.checkpoint, args.datasets, output, resolve_device(args.device))
    print(f"wrote {output}: the range of {len(low)} input columns over {len(args.datasets)} dataset(s)")


def cli() -> None:
    """Console-script entry point ``nerd-data-range``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
