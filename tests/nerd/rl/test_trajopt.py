"""Open-loop trajectory optimisation (nerd/rl/trajopt.py): the episode's return and gradient ascent through the
differentiable ground truth."""

import torch

from nerd.diffsim import GroundTruthRollout
from nerd.envs import make_env
from nerd.rl.tasks import make_task
from nerd.rl.trajopt import episode_return, joint_torques, optimise_actions, step_rewards


def test_episode_return_counts_rewards_up_to_the_first_terminating_state():
    """Cartpole states: row 0 leaves the rail (|x| > 4) at frame 1 and comes back; row 1 never terminates."""
    task = make_task("Cartpole", "swingup", 2)
    states = torch.zeros(2, 4, 4)
    states[0, 1, 0] = 5.0
    actions = torch.zeros(2, 4, 1)
    rewards = step_rewards(task, states, actions)
    returns = episode_return(task, states, actions)
    assert torch.allclose(returns, torch.stack([rewards[0, :2].sum(), rewards[1].sum()]))
    assert float(rewards[1, 0]) == 5.0  # upright at rest: the reward's bias, no cost


def test_gradient_ascent_through_the_ground_truth_beats_doing_nothing():
    """Ten frames from two hanging-down starts: five Adam steps on the summed reward raise it above zero actions',
    and the plan's recorded return is its return in the simulator."""
    env = make_env("Cartpole", 2, use_graph=False)
    task = make_task("Cartpole", "swingup", 2)
    sim = GroundTruthRollout(env)
    start = torch.tensor([[0.0, 3.0, 0.0, 0.0], [0.5, -2.5, 0.2, 0.0]])
    plan = optimise_actions(sim, env, task, start, horizon=10, iterations=5, lr=0.3)
    with torch.no_grad():
        zero = torch.zeros(2, 10, 1)
        nothing = step_rewards(task, sim(start, joint_torques(env, zero)), zero).sum(dim=1)
        planned = step_rewards(task, sim(start, joint_torques(env, plan.actions)), plan.actions).sum(dim=1)
    assert bool((plan.returns > nothing).all()) and torch.allclose(planned, plan.returns, atol=1e-4)
    assert plan.history[-1] > plan.history[0] and plan.actions.abs().max() <= 1.0
    # Built front to back in windows of 4 frames (4 windows at a stride of 2, the last one ending at frame 10).
    windowed = optimise_actions(sim, env, task, start, horizon=10, iterations=3, lr=0.3, window=4)
    assert len(windowed.history) == 4 * 3 and bool((windowed.returns > nothing).all())
