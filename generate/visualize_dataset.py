"""Print a dataset's summary and write a PNG of every state coordinate and joint torque (histogram, trajectories).

Thin wrapper around :mod:`nerd.scripts.visualize` (installed as ``nerd-visualize``); ``--help`` lists the options.
"""

from nerd.scripts.visualize import cli

if __name__ == "__main__":
    cli()
