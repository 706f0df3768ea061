"""Generate a trajectory dataset (HDF5) from the ground-truth simulator.

Thin wrapper around :mod:`nerd.scripts.generate` (installed as ``nerd-generate``); ``--help`` lists the options.
"""

from nerd.scripts.generate import cli

if __name__ == "__main__":
    cli()
