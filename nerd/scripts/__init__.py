"""Command-line programs; ``generate/``, ``train/`` and ``eval/`` hold thin wrappers, setup.py installs them as
``nerd-*`` console scripts."""
