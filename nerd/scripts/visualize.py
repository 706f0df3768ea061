"""Print a dataset's summary and write a PNG of every state coordinate and joint torque (histogram, trajectories).

Installed as ``nerd-visualize``; ``python generate/visualize_dataset.py`` runs the same.

Example:
    python generate/visualize_dataset.py --dataset data/Cartpole/train.hdf5 --png outputs/cartpole_data.png
"""

from pathlib import Path

from nerd.cli import check_output, make_parser, quiet_warp, run_main
from nerd.errors import UserError


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` (default: the command line) and run."""
    parser = make_parser(__doc__)
    parser.add_argument("--dataset", required=True, help="HDF5 file written by generate_dataset.py")
    parser.add_argument("--png", default=None, help="plot path (default: next to the dataset, .png)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing plot")
    args = parser.parse_args(argv)
    png = Path(args.png) if args.png else Path(args.dataset).with_suffix(".png")
    if png.suffix.lower() != ".png" or png.resolve() == Path(args.dataset).resolve():
        raise UserError(f"--png {png}: give a .png path other than the dataset's")
    check_output(png, args.overwrite)
    if not Path(args.dataset).is_file():
        raise FileNotFoundError(f"dataset not found: {args.dataset}")

    quiet_warp()
    from nerd.datasets.summary import format_summary, plot_dataset, summarize_dataset  # after the checks

    print(format_summary(summarize_dataset(args.dataset)))
    print(f"wrote {plot_dataset(args.dataset, png)}")


def cli() -> None:
    """Console-script entry point ``nerd-visualize``: one-line errors, exit codes of :func:`nerd.cli.run_main`."""
    run_main(main)
