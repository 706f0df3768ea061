"""CubeToss: the release's cube (mass, corners, material), its free flight, its rest on the ground, its sampler."""

import math

import numpy as np
import pytest
import torch

from nerd.envs import cube_toss, make_env
from nerd.frames import quat_angle, quat_from_axis_angle, quat_mul, quat_rotate, quat_rotate_inv

S = cube_toss.HALF_EXTENT
G = 9.81


def test_mass_inertia_and_release_defaults():
    """1.1510227 kg and I = 0.00210695·E (the release's); 20 substeps at 1/148 s, mass matrix every substep, Huber
    friction, no torques."""
    env = make_env("CubeToss", 1)
    np.testing.assert_allclose(env.model.body_mass.numpy(), [1.1510227], rtol=1e-6)
    np.testing.assert_allclose(env.model.body_inertia.numpy()[0], 0.00210695 * np.eye(3), rtol=1e-5, atol=1e-12)
    assert (env.dof_q, env.dof_qd, env.act_dim, env.action_dim) == (7, 6, 0, 0)
    assert env.sim_substeps == 20 and env.frame_dt == pytest.approx(1 / 148)
    assert (env.mass_matrix_refresh, env.contact_friction, env.robot_variant) == ("substep", "huber", "sim")
    ke, kd, kf, mu = (env.model.shape_material_ke.numpy()[0], env.model.shape_material_kd.numpy()[0],
                      env.model.shape_material_kf.numpy()[0], env.model.shape_material_mu.numpy()[0])
    np.testing.assert_allclose([ke, kd, kf, mu], [1e4, 1e3, 50.0, 0.15], rtol=1e-6)


def test_corners_are_the_release_candidates_in_its_order():
    """8 corners in get_box_vertex order (bit 0 = x, bit 1 = y, bit 2 = z), thickness 2 x 1e-5 m."""
    env = make_env("CubeToss", 1)
    c = env.ground.candidates
    release_order = [[-1, -1, -1], [1, -1, -1], [-1, 1, -1], [1, 1, -1],
                     [-1, -1, 1], [1, -1, 1], [-1, 1, 1], [1, 1, 1]]  # robots_numbers.json, cube
    np.testing.assert_allclose(c.point, S * np.array(release_order), rtol=1e-6)
    np.testing.assert_allclose(c.thickness, 2e-5, rtol=1e-6)


@pytest.mark.parametrize("friction", ["huber", "coulomb"])
def test_cube_dropped_flat_comes_to_rest_on_its_face(friction):
    """From the release's default pose (z = 1.5 s, flat, at rest) it settles at z = s + 2e-5 - m g / (4 ke)."""
    env = make_env("CubeToss", 1, contact_friction=friction)
    start = torch.zeros(1, 13)
    start[0, 2], start[0, 6] = cube_toss.START_HEIGHT, 1.0
    env.set_states(start)
    for _ in range(148):  # 1 s
        env.step(torch.zeros(1, 0))
    s = env.get_states()[0]
    rest_z = S + 2e-5 - cube_toss.MASS * G / (4 * 1e4)  # each corner spring carries a quarter of the weight
    assert s[2].item() == pytest.approx(rest_z, abs=2e-5)
    assert s[:2].abs().max() < 1e-5 and s[7:].abs().max() < 1e-3
    torch.testing.assert_close(s[3:7], torch.tensor([0.0, 0.0, 0.0, 1.0]), atol=1e-5, rtol=0)
    depths = env.get_contacts()["contact_depths"][0]
    assert (depths[:4] < 0).all() and (depths[4:] > 2 * S - 1e-3).all()  # bottom corners slightly inside


def test_ballistic_flight_is_a_parabola_with_constant_angular_momentum():
    """Before any corner touches: the centre follows p0 + v0 t - g t^2 / 2 (up to semi-implicit Euler's O(dt)
    term), the linear velocity v0 - g t, and the angular momentum I w (world) stays constant; the orientation
    turns at that constant rate."""
    env = make_env("CubeToss", 1)
    p0, v0, w0 = torch.tensor([0.1, -0.2, 1.0]), torch.tensor([0.7, -0.4, 1.5]), torch.tensor([3.0, -5.0, 8.0])
    q0 = quat_from_axis_angle(torch.tensor([1.0, 2.0, 3.0]), torch.tensor(0.4))
    env.set_states(torch.cat([p0, q0, v0, w0])[None])
    frames = 37  # 0.25 s: the lowest point stays ~0.8 m up
    for _ in range(frames):
        env.step(torch.zeros(1, 0))
    s = env.get_states()[0]
    t, dt = frames * env.frame_dt, env.sim_dt
    gravity = torch.tensor([0.0, 0.0, -G])
    parabola = p0 + v0 * t + 0.5 * gravity * t**2
    # Semi-implicit Euler lags the parabola by g t dt / 2 exactly; bound it, and check the discrete sum tightly.
    assert (s[:3] - parabola).norm() <= G * t * dt
    torch.testing.assert_close(s[:3], parabola + 0.5 * gravity * t * dt, atol=2e-5, rtol=0)
    torch.testing.assert_close(s[7:10], v0 + gravity * t, atol=1e-4, rtol=0)
    inertia = cube_toss.INERTIA
    torch.testing.assert_close(inertia * s[10:13], inertia * w0, atol=1e-6, rtol=0)
    turned = quat_mul(quat_from_axis_angle(w0, w0.norm() * t), q0)
    assert quat_angle(quat_mul(s[3:7], turned * torch.tensor([-1.0, -1.0, -1.0, 1.0]))) < 2e-3


def test_reset_sampler_ranges_and_corners_above_ground():
    """Position in ±20 s, ±20 s, [0.9 s, 5 s]; tilt ≤ pi/6; body-frame rates in the release's boxes; every
    corner ≥ 1e-3 m up, reached by resampling (some draws land low enough to need it)."""
    env = make_env("CubeToss", 1)
    n = 4000
    states = env.sample_initial_states(n, torch.Generator().manual_seed(0))
    p, q, v, w = states[:, :3], states[:, 3:7], states[:, 7:10], states[:, 10:13]
    assert (p[:, :2].abs() <= 20 * S + 1e-6).all()
    assert (p[:, 2] >= 0.9 * S - 1e-6).all() and (p[:, 2] <= 5 * S + 1e-6).all()
    torch.testing.assert_close(q.norm(dim=1), torch.ones(n))
    assert (quat_angle(q) <= math.pi / 6 + 1e-5).all()
    w_b, v_b = quat_rotate_inv(q, w), quat_rotate_inv(q, v)
    for value, (low, high) in ((w_b, cube_toss.RESET_ANG_VEL_RANGE), (v_b, cube_toss.RESET_LIN_VEL_RANGE)):
        assert (value >= torch.tensor(low) - 1e-4).all() and (value <= torch.tensor(high) + 1e-4).all()
        # The draws fill their boxes (not a narrower or shifted range).
        assert (value.amin(0) < torch.tensor(low) + 0.1).all() and (value.amax(0) > torch.tensor(high) - 0.1).all()
    corners = p[:, None, :] + quat_rotate(q[:, None, :].expand(n, 8, 4), cube_toss.corner_points().expand(n, 8, 3))
    lowest = corners[..., 2].amin(1)
    assert (lowest >= 1e-3).all()
    assert lowest.min() < 5e-3  # the bound is active: near-ground poses are kept, not pushed up
    env.set_states(states[:1])
    assert (env.get_contacts()["contact_depths"] >= 1e-3 - 1e-6).all()


def test_real_variant_is_a_mismatched_material():
    """The "real" stand-in differs from the release's cube only in its contact material (mu 0.3, ke 3e4, kd 1e2),
    and from the same toss it ends elsewhere."""
    sim, real = make_env("CubeToss", 2), make_env("CubeToss", 2, robot_variant="real")
    assert real.robot_variant == "real"
    np.testing.assert_allclose(real.model.body_mass.numpy(), sim.model.body_mass.numpy())
    np.testing.assert_allclose([real.model.shape_material_mu.numpy()[0], real.model.shape_material_ke.numpy()[0],
                                real.model.shape_material_kd.numpy()[0]], [0.3, 3e4, 1e2], rtol=1e-6)
    start = sim.sample_initial_states(2, torch.Generator().manual_seed(1))
    for env in (sim, real):
        env.set_states(start)
        for _ in range(74):
            env.step(torch.zeros(2, 0))
    assert (sim.get_states()[:, :2] - real.get_states()[:, :2]).norm(dim=1).min() > 0.01


def test_mismatched_simulator_evaluation_and_real_dataset_attributes(tmp_path):
    """The "sim" ground truth evaluated against the "real" one has a non-zero error (against itself: zero), and a
    dataset generated from the "real" variant names itself so; the whole pipeline takes (N, 0) torques."""
    import h5py

    from nerd.evaluation import evaluate_passive
    from nerd.generation import GenerationConfig, generate_dataset

    common = dict(env_name="CubeToss", model_path=None, env_mode="ground-truth", num_envs=4, num_rollouts=4,
                  horizon=30, seed=500, progress=False, robot_variant="real")
    same = evaluate_passive(**common)
    mismatched = evaluate_passive(**common, evaluated_robot_variant="sim")
    assert same["metrics"]["base_position_error"] == 0.0
    assert mismatched["metrics"]["base_position_error"] > 1e-3
    # The "sim" cube given the real material (what a system identification would find) is the real ground truth.
    real = cube_toss.ROBOT_VARIANTS["real"]

    def identified(env):
        env.set_model_values({f"shape_material_{k}": [real[k]] for k in ("ke", "kd", "mu")})

    corrected = evaluate_passive(**common, evaluated_robot_variant="sim", evaluated_setup=identified)
    assert corrected["metrics"]["base_position_error"] == 0.0 and corrected["evaluated_setup"]
    assert (mismatched["robot_variant"], mismatched["evaluated_robot_variant"]) == ("real", "sim")
    path = generate_dataset(GenerationConfig("CubeToss", 200, trajectory_length=20, num_envs=10, passive=True,
                                             robot_variant="real"), tmp_path / "real.hdf5", progress=False).path
    with h5py.File(path) as f:
        assert f.attrs["robot_variant"] == "real" and f.attrs["joint_act_dim"] == 0
        assert f["data/joint_acts"].shape[-1] == 0


def test_set_model_values_changes_every_copy_and_refuses_what_it_cannot_change():
    from nerd.errors import UserError

    env = make_env("CubeToss", 3)
    env.set_model_values({"shape_material_mu": torch.tensor([0.4])})
    np.testing.assert_allclose(env.model.shape_material_mu.numpy(), [0.4] * 3, rtol=1e-6)
    with pytest.raises(UserError, match="'body_mass' is not a model array set_model_values can change"):
        env.set_model_values({"body_mass": [2.0]})
    with pytest.raises(UserError, match="'nothing' is not a model array"):
        env.set_model_values({"nothing": [2.0]})
    with pytest.raises(UserError, match=r"'shape_material_ke' takes one copy's values of shape \(1,\), got \(2,\)"):
        env.set_model_values({"shape_material_ke": [1.0, 2.0]})
