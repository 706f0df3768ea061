"""System identification through the differentiable ground truth (nerd/sysid.py)."""

import torch

from nerd.diffsim import GroundTruthRollout
from nerd.envs import make_env
from nerd.sysid import fit_parameter_scale, scaled_parameter


def test_recovers_the_pendulum_link_length_from_20_percent_off():
    """Link 0's length (the second joint's pivot, 1.5 m) scaled by 0.9 in the reference; the fit starts at 1.08."""
    env = make_env("PendulumWithContact", 1, contact_config=0, use_graph=False)
    sim = GroundTruthRollout(env)
    start, torques = torch.tensor([[0.4, -0.8, 1.0, -1.5]]), torch.zeros(1, 6, 2)
    with torch.no_grad():
        reference = sim(start, torques, {"joint_X_p": scaled_parameter(sim, "joint_X_p", (1, 0), torch.tensor(0.9))})
    fit = fit_parameter_scale(sim, "joint_X_p", (1, 0), start, torques, reference, start=1.08, iterations=12)
    assert abs(fit.scale - 0.9) < 1e-3
