"""Fixed-size contact candidates, their detection, and the contact physics they drive."""

import math

import numpy as np
import pytest
import torch
import warp as wp

from nerd.envs import ant, make_env, pendulum
from nerd.envs.contacts import FRICTION_SMOOTHING, eval_ground_contact_forces
from nerd.frames import quat_rotate


@pytest.mark.parametrize("name,count", [("Cartpole", 0), ("PendulumWithContact", 4), ("Ant", 25), ("CubeToss", 8)])
def test_candidate_counts(name, count):
    """Cartpole has no contacts, the pendulum 4 (capsule ends), the Ant 25 (sphere + 2 per capsule), the cube 8
    (box corners)."""
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


def test_pendulum_reset_is_the_releases_upward_second_link():
    """The release's random reset (what its passive evaluation starts from): the second link points upwards, the
    first anywhere, both rates within +-2 rad/s; so nothing starts below z = 0.5 m (the first link hanging down)
    and every draw is clear of the default ground (config 1, z = 0)."""
    env = make_env("PendulumWithContact", 4000, contact_config=1)
    states = env.sample_reset_states(4000, torch.Generator().manual_seed(0))
    assert states[:, :2].abs().max() <= math.pi + 1e-6 and states[:, 2:].abs().max() <= 2.0
    assert states[:, 0].min() < -3.0 and states[:, 0].max() > 3.0 and states[:, 2:].abs().max() > 1.9
    env.set_states(states)
    c = env.get_contacts()
    tip_rise = c["contact_points_0"][:, 3, 2] - c["contact_points_0"][:, 2, 2]  # second link: end minus start
    assert (tip_rise >= -1e-5).all() and tip_rise.max() > 1.49
    assert (c["contact_depths"] - c["contact_thicknesses"]).min() >= 0.4 - 1e-5


def test_pendulum_errors_are_the_releases_first_joint_and_second_joint():
    """The release scores the pendulum's first joint as its "base orientation" and the second as its joint error
    (eval_passive_motion.py: base_orientation_idx [0], joint_idx [1]), each wrapped."""
    from nerd.evaluation import state_errors

    env = make_env("PendulumWithContact", 1)
    gt = torch.tensor([[0.5, -3.1, 0.0, 0.0]])
    pred = torch.tensor([[0.2, 3.1, 7.0, -7.0]])  # q1 differs by 0.083 rad across the wrap; rates are not scored
    errors = state_errors(gt, pred, env)
    assert set(errors) - {"per_dof"} == {"base_orientation_error", "joint_position_error"}
    torch.testing.assert_close(errors["base_orientation_error"], torch.tensor([0.3]))
    torch.testing.assert_close(errors["joint_position_error"], torch.tensor([2 * math.pi - 6.2]), atol=1e-5, rtol=0)


def test_random_ground_planes_start_out_of_contact_within_their_range():
    """Every data-generation plane lies below all contact points of the initial state (radius included); the
    release's offsets reach down to 3.5 m below the pivot."""
    env = make_env("PendulumWithContact", 2000)
    generator = torch.Generator().manual_seed(0)
    env.set_states(env.sample_initial_states(2000, generator))
    c = env.get_contacts()
    root = env.get_root_body_q()[:, :3]
    normals, points = pendulum.PendulumWithContact.sample_ground_planes(
        c["contact_points_0"], c["contact_thicknesses"], root, generator)
    torch.testing.assert_close(normals.norm(dim=-1), torch.ones(2000))
    offset = (points * normals).sum(-1)
    clearance = (c["contact_points_0"] * normals[:, None]).sum(-1) - c["contact_thicknesses"] - offset[:, None]
    assert clearance.min() >= -1e-5
    below_pivot = (root * normals).sum(-1) - offset
    lowest_gap = clearance.min(dim=1).values
    assert below_pivot.max() <= 3.5 + 1e-5 and (lowest_gap > 1.0).float().mean() > 0.2


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


@pytest.fixture(scope="module")
def ant_at_rest():
    """The Ant (Coulomb friction, its default) after 5 s of zero torque from its default pose: (env, state)."""
    env = make_env("Ant", 1)
    env.set_states(env.default_states(1))
    for _ in range(300):
        env.step_with_joint_act(torch.zeros(1, 8))
    return env, env.get_states()


def test_ant_dropped_on_the_ground_comes_to_rest_upright(ant_at_rest):
    """From the default pose (1 m up), 5 s of zero torque leave the ant upright, still, on its feet."""
    env, states = ant_at_rest
    s = states[0]
    up = quat_rotate(s[3:7], torch.tensor([0.0, 0.0, 1.0]))
    assert 0.2 < s[2] < ant.START_HEIGHT, s[2]
    assert up[2] > 0.99
    assert s[15:].abs().max() < 0.05
    c = env.get_contacts()
    assert (c["contact_depths"][0, 0] > ant.TORSO_RADIUS)  # the torso does not touch the ground


def sphere_contact_wrench(vel: tuple[float, float, float]) -> np.ndarray:
    """Wrench (force, torque about the COM) on a ball (r 0.1 m, centre 0.09 m up: 1 cm deep) moving at ``vel``."""
    ke, kd, kf, mu = ant.CONTACT_KE, ant.CONTACT_KD, ant.CONTACT_KF, ant.CONTACT_MU

    def arr(values, dtype):
        return wp.array(values, dtype=dtype, device="cpu")

    body_f = wp.zeros(1, dtype=wp.spatial_vector, device="cpu")
    wp.launch(eval_ground_contact_forces, dim=1, device="cpu", inputs=[
        arr([wp.transform((0.0, 0.0, 0.09), wp.quat_identity())], wp.transform),
        arr([wp.spatial_vector(*vel, 0.0, 0.0, 0.0)], wp.spatial_vector), arr([wp.vec3()], wp.vec3),
        arr([0], int), arr([ke], float), arr([kd], float), arr([kf], float), arr([0.0], float), arr([mu], float),
        arr([0], int), arr([wp.vec3()], wp.vec3), arr([wp.vec3()], wp.vec3),
        arr([wp.vec3(0.0, 0.0, -1.0)], wp.vec3),  # Newton's normal, robot -> ground
        arr([0.1], float), arr([0.0], float), FRICTION_SMOOTHING,
    ], outputs=[body_f])
    return body_f.numpy()[0]


@pytest.mark.parametrize("speed,friction", [
    # 1 cm deep: |Fn| = 4e4 * 0.01 = 400 N, mu |Fn| = 300 N; Huber norm H(v) = v²/2 (v <= 1), v - 1/2 (v > 1).
    (0.3, 900.0),  # kf H = 135 < 300: viscous, kf v = 900 N (Coulomb would cap it at 300 N)
    (0.5, 1200.0),  # kf H = 375 > 300: mu |Fn| v / H = 300 * 0.5 / 0.125
    (2.0, 400.0),  # mu |Fn| v / H = 300 * 2 / 1.5
])
def test_huber_friction_law_on_a_sliding_ball(speed, friction):
    """warp.sim's friction ft = vt / H(vt) * min(kf H(vt), mu |Fn|) against a hand computation."""
    wrench = sphere_contact_wrench((speed, 0.0, 0.0))
    # Friction opposes the slide; the 1 cm spring pushes up; the contact point (0, 0, -0.1) from the COM gives
    # torque r x F = (0, 0.1 * friction, 0).
    np.testing.assert_allclose(wrench, [-friction, 0.0, 400.0, 0.0, 0.1 * friction, 0.0], rtol=1e-5, atol=1e-3)


def test_contact_damping_acts_on_approach_only():
    """The normal damper adds kd * |vn| while the ball sinks (vn < 0) and nothing while it rises."""
    np.testing.assert_allclose(sphere_contact_wrench((0.0, 0.0, -0.1))[:3], [0.0, 0.0, 410.0], atol=1e-3)
    np.testing.assert_allclose(sphere_contact_wrench((0.0, 0.0, 0.1))[:3], [0.0, 0.0, 400.0], atol=1e-3)


def test_friction_laws_agree_without_slip_and_differ_when_sliding(ant_at_rest):
    """Huber and Coulomb laws share the normal model: from rest they step the same; sliding, they do not.

    This also checks the plumbing of the Huber law (wrenches written to ``state.body_f`` before the solver
    step) against Newton's own contact evaluation.
    """
    envs = {law: make_env("Ant", 2, contact_friction=law) for law in ("huber", "coulomb")}
    assert make_env("Ant", 1).contact_friction == "coulomb"
    states = ant_at_rest[1].repeat(2, 1)
    states[1, 15] = 1.5  # env 1 slides along x at 1.5 m/s
    after = {}
    for law, env in envs.items():
        env.set_states(states)
        for _ in range(3):
            env.step_with_joint_act(torch.zeros(2, 8))
        after[law] = env.get_states()
    torch.testing.assert_close(after["huber"][0], after["coulomb"][0], atol=2e-4, rtol=0)
    assert (after["huber"][1, 15] - after["coulomb"][1, 15]).abs() > 0.01
    with pytest.raises(ValueError, match="valid: coulomb, huber"):
        make_env("Ant", 1, contact_friction="viscous")
