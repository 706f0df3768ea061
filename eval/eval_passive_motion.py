"""Evaluate passive motion of NeRD (or the ground truth) against the ground-truth simulator.

Thin wrapper around :mod:`nerd.scripts.eval_passive` (installed as ``nerd-eval``); ``--help`` lists the options.
"""

from nerd.scripts.eval_passive import cli

if __name__ == "__main__":
    cli()
