"""Reinforcement learning on the neural or ground-truth simulator (the paper's Table 1).

``tasks/`` defines the tasks (one module per robot), ``vec_env`` the rl-games vectorised environment,
``config`` the RL config files, ``runner`` PPO training and policy playback, ``batch_eval`` the
policies x simulators table. Entry points: ``eval/run_rl.py`` and ``eval/batch_eval_policy.py``.
"""
