"""Print a dataset's summary and write a PNG of state histograms and a few trajectories.

Example:
    python generate/visualize_dataset.py --dataset data/Cartpole/train.hdf5 --png data/Cartpole/train.png
"""

import argparse
from pathlib import Path

from nerd.cli import run_main
from nerd.datasets.summary import format_summary, plot_dataset, summarize_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="HDF5 file written by generate_dataset.py")
    parser.add_argument("--png", default=None, help="plot path (default: next to the dataset, .png)")
    args = parser.parse_args()
    print(format_summary(summarize_dataset(args.dataset)))
    png = plot_dataset(args.dataset, args.png or Path(args.dataset).with_suffix(".png"))
    print(f"wrote {png}")


if __name__ == "__main__":
    run_main(main)
