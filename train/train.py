"""Train a NeRD model on a generated dataset.

Thin wrapper around :mod:`nerd.scripts.train` (installed as ``nerd-train``); ``--help`` lists the options.
"""

from nerd.scripts.train import cli

if __name__ == "__main__":
    cli()
