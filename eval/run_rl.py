"""Train a PPO policy (rl-games) in the neural or ground-truth simulator, or play a trained one back.

Thin wrapper around :mod:`nerd.scripts.rl` (installed as ``nerd-rl``); ``--help`` lists the options.
"""

from nerd.scripts.rl import cli

if __name__ == "__main__":
    cli()
