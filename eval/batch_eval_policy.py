"""Evaluate several policies in several simulators and write one table (the paper's Table 1).

Thin wrapper around :mod:`nerd.scripts.batch_eval` (installed as ``nerd-batch-eval``); ``--help`` lists the options.
"""

from nerd.scripts.batch_eval import cli

if __name__ == "__main__":
    cli()
