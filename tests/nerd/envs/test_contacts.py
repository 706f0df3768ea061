"""Fixed-size contact candidates (spec §4), their detection, and the contact physics they drive."""

import math

import numpy as np
import pytest
import torch

from nerd.envs import ant, make_env, pendulum
from nerd.frames import quat_rotate


@pytest.mark.parametrize("name,count", [("Cartpole", 0), ("PendulumWithContact", 4), ("Ant", 25)])
def test_candidate_counts(name, count):
    """Cartpole has no contacts, the pendulum 4 (capsule ends), the Ant 25 (sphere + 2 per capsule)."""
    env = make_env(name, 2)
    assert env.contact_count == count
    contacts = env.get_contacts()
    assert contacts["contact_normals"].shape == (2, count, 3)
    assert contacts["contact_depths"].shape == (2, count)


def test_pendulum_candidates_are_capsule_end_points():
    """At q = 0 both links lie along +x at 2 m height; candidates sit at x = 0, 1.5, 1.5, 3 with radius 0.1."""
    env = make_env("PendulumWithContact", 1)
    env.set_states(torch.zeros(1, 4))
    c = env.get_contacts()
    expected = torch.tensor([[0.0, 0.0, 2.0], [1.5, 0.0, 2.0], [1.5, 0.0, 2.0], [3.0, 0.0, 2.0]])
    torch.testing.assert_close(c["contact_points_0"][0], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(c["contact_depths"][0], torch.full((4,), 2.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(c["contact_points_1"][0], expected * torch.tensor([1.0, 1.0, 0.0]), atol=1e-5, rtol=0)
    assert torch.all(c["contact_thicknesses"] == 0.1)


def test_tilted_ground_config_depth_is_signed_distance():
    """Config 2 (offset 0.2, rotated plane): depth = n . (x - (0, 0, 0.2)) and ground point = x - depth n."""
    env = make_env("PendulumWithContact", 1, contact_config=2)
    env.set_states(torch.tensor([[0.3, -0.7, 0.0, 0.0]]))
    c = env.get_contacts()
    normal, point = pendulum.PendulumWithContact.ground_plane(2)
    assert abs(normal[2].item() - math.cos(math.pi / 8) * math.cos(math.pi / 16)) < 1e-5
    x = c["contact_points_0"][0]
    torch.testing.assert_close(c["contact_depths"][0], (x - point) @ normal, atol=1e-5, rtol=0)
    expected_ground = x - c["contact_depths"][0, :, None] * normal
    torch.testing.assert_close(c["contact_points_1"][0], expected_ground, atol=1e-5, rtol=0)


def test_solver_consumes_the_same_contacts():
    """The Newton contact set handed to the solver holds the detected ground points and (negated) normals."""
    env = make_env("Ant", 2)
    env.set_states(env.default_states(2))
    c = env.get_contacts()
    solver = env.contacts
    assert solver.rigid_contact_count.numpy()[0] == 2 * 25
    np.testing.assert_allclose(solver.rigid_contact_normal.numpy(), -c["contact_normals"].reshape(-1, 3).numpy())
    np.testing.assert_allclose(solver.rigid_contact_point1.numpy(), c["contact_points_1"].reshape(-1, 3).numpy())


def test_pendulum_falling_on_a_plane_stays_above_it():
    """Dropped from horizontal onto config 3 (plane at z = 0.5), no capsule sinks more than 5 cm into the ground."""
    env = make_env("PendulumWithContact", 1, contact_config=3)
    env.set_states(torch.zeros(1, 4))
    lowest = []
    for _ in range(180):
        env.step_with_joint_act(torch.zeros(1, 2))
        c = env.get_contacts()
        lowest.append((c["contact_depths"] - c["contact_thicknesses"]).min().item())
    assert min(lowest) > -0.05, min(lowest)
    assert min(lowest) < 0.01  # it does reach the plane


def test_ant_mass_and_torso_inertia():
    """The Ant weighs 117.05 kg (torso 31.654, upper legs 7.832, lower legs 13.518); torso inertia 0.596/0.596/1.089."""
    env = make_env("Ant", 1)
    mass = env.model.body_mass.numpy()
    np.testing.assert_allclose(mass.sum(), 117.05, atol=0.01)
    np.testing.assert_allclose(mass[0], 31.654, atol=0.002)
    np.testing.assert_allclose(sorted(mass[1:]), [7.832] * 4 + [13.518] * 4, atol=0.002)
    np.testing.assert_allclose(np.diag(env.model.body_inertia.numpy()[0]), [0.596, 0.596, 1.089], atol=0.001)


def test_ant_dropped_on_the_ground_comes_to_rest_upright():
    """From the default pose, 3 s of zero torque leave the ant standing upright, still, on its feet."""
    env = make_env("Ant", 1)
    env.set_states(env.default_states(1))
    for _ in range(180):
        env.step_with_joint_act(torch.zeros(1, 8))
    s = env.get_states()[0]
    up = quat_rotate(s[3:7], torch.tensor([0.0, 0.0, 1.0]))
    assert 0.2 < s[2] < ant.START_HEIGHT, s[2]
    assert up[2] > 0.99
    assert s[15:].abs().max() < 0.05
    c = env.get_contacts()
    assert (c["contact_depths"][0, 0] > ant.TORSO_RADIUS)  # the torso does not touch the ground
