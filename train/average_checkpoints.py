"""Average the weights of fine-tunes of one NeRD model into one checkpoint.

Thin wrapper around :mod:`nerd.scripts.average` (installed as ``nerd-average``); ``--help`` lists the options.
"""

from nerd.scripts.average import cli

if __name__ == "__main__":
    cli()
