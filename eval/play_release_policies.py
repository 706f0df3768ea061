"""Play the NeRD release's published Ant policies in our ground truth.

Thin wrapper around :mod:`nerd.scripts.play_release_policies`; ``--help`` lists the options.
"""

from nerd.scripts.play_release_policies import cli

if __name__ == "__main__":
    cli()
