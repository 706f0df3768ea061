"""Record in a NeRD checkpoint the range of the data it was trained on.

Thin wrapper around :mod:`nerd.scripts.data_range` (installed as ``nerd-data-range``); ``--help`` lists the options.
"""

from nerd.scripts.data_range import cli

if __name__ == "__main__":
    cli()
