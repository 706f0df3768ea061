"""Print a dataset's summary and write a PNG of state histograms and a few trajectories.

Thin wrapper around :mod:`nerd.scripts.visualize` (installed as ``nerd-visualize``); ``--help`` lists the options.
"""

from nerd.scripts.visualize import cli

if __name__ == "__main__":
    cli()
