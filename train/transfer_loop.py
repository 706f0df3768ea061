"""Train a policy in NeRD, refine the model with the policy's ground-truth data, evaluate in both simulators.

Thin wrapper around :mod:`nerd.scripts.transfer` (installed as ``nerd-transfer``); ``--help`` lists the options.
"""

from nerd.scripts.transfer import cli

if __name__ == "__main__":
    cli()
