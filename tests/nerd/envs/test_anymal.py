"""ANYmal built in code: its inertia, its two mass-matrix variants, its controller and samplers."""

import pytest
import torch

from nerd.envs import make_env
from nerd.envs.anymal import PD_KD, PD_KP, default_joint_q, joint_names
from nerd.errors import UserError
from nerd.frames import quat_rotate
from tests.helpers import com_acceleration

# Joint-space mass-matrix diagonal (HAA, HFE, KFE) of a leg without armature, from the release's model.
LEG_H_DIAGONAL = {"physical": (0.490, 0.457, 0.0357), "release": (0.952, 2.974, 0.556)}


@pytest.fixture(scope="module", params=["physical", "release"])
def variant_env(request):
    return request.param, make_env("Anymal", 1, robot_variant=request.param, use_graph=False)


def test_bodies_joints_and_contacts_follow_robots_md(variant_env):
    """13 bodies, 53.354 kg, joints in the release's order, 14 candidates at the default heights of §1.9."""
    variant, env = variant_env
    assert (env.bodies_per_env, env.dof_q, env.dof_qd, env.act_dim, env.contact_count) == (13, 19, 18, 12, 14)
    assert env.model.body_mass.numpy().sum() == pytest.approx(53.354, abs=1e-3)
    assert [n.split()[0] for n in env.state_names()[7:19]] == joint_names()
    assert joint_names()[:3] == ["RH_HAA", "RH_HFE", "RH_KFE"]
    # Release: warp.sim's children of joints 1..12 (RH, LH, RF, LF) are bodies in URDF order (LF, RF, LH, RH).
    children = env.model.joint_child.numpy()[1:13].tolist()
    assert children == (list(range(1, 13)) if variant == "physical" else [10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3])
    env.set_states(env.default_states(1))
    depths = env.get_contacts()["contact_depths"][0]
    expected = torch.tensor([0.7, 0.7] + [0.4318, 0.4354, 0.1070] * 4)
    torch.testing.assert_close(depths, expected, atol=2e-4, rtol=0)


def test_free_fall_accelerates_the_com_at_g_or_at_the_release_rate(variant_env):
    """Zero torques in the air: the COM falls at g (physical, 1 %) or about 15.8 m/s² (release's scrambled H)."""
    variant, env = variant_env
    states = env.default_states(1)
    states[:, 2] = 5.0
    env.set_states(states)
    accel = com_acceleration(env, torch.zeros(1, 12))
    assert accel[:2].abs().max() < 0.01
    if variant == "physical":
        assert accel[2].item() == pytest.approx(-9.81, rel=0.01)
    else:
        assert accel[2].item() == pytest.approx(-15.8, abs=0.15)


def test_leg_mass_matrix_diagonal_matches_robots_md(variant_env):
    """Featherstone's joint-space H (without armature) of every leg matches the release's numbers in each variant."""
    variant, env = variant_env
    env.set_states(env.default_states(1))
    env.step_with_joint_act(torch.zeros(1, 12))
    h = torch.as_tensor(env.solver.H.numpy()[: 18 * 18]).view(18, 18).diagonal()[6:].view(4, 3)
    torch.testing.assert_close(h, torch.tensor(LEG_H_DIAGONAL[variant]).expand(4, 3), rtol=0.01, atol=0)


@pytest.mark.parametrize("variant", ["physical", "release"])
def test_default_pose_stands_under_the_pd_law(variant):
    """Dropped from the default pose with zero actions (Kp 85, Kd 2), the robot lands and stays up for 2 s."""
    env = make_env("Anymal", 2, robot_variant=variant)
    env.set_states(env.default_states(2))
    for _ in range(120):
        env.step(torch.zeros(2, 12))
    states = env.get_states()
    up = quat_rotate(states[:, 3:7], torch.tensor([0.0, 0.0, 1.0]).expand(2, 3))[:, 2]
    assert (states[:, 2] > 0.5).all() and (up > 0.99).all(), (states[:, 2], up)
    assert states[:, 19:].abs().max() < 0.5
    feet = env.get_contacts()["contact_depths"][:, [4, 7, 10, 13]]
    assert (feet < 0.03).all()  # all four feet carry the weight


def test_pd_law_and_torque_mode():
    """Position mode: τ = Kp (q0 + 0.5 a − q) − Kd q̇ from the current state; torque mode: a·scale + 85 (q0 − q)."""
    env = make_env("Anymal", 3)
    g = torch.Generator().manual_seed(0)
    states = env.sample_initial_states(3, g)
    env.set_states(states)
    actions = torch.rand(3, 12, generator=g) * 2 - 1
    q, qd = states[:, 7:19], states[:, 25:37]
    expected = PD_KP * (default_joint_q() + 0.5 * actions - q) - PD_KD * qd
    torch.testing.assert_close(env.compute_torques(actions), expected)
    kp, kd = torch.full((3, 1), 50.0), torch.full((3, 1), 0.5)
    env.set_pd_gains(kp, kd)
    torch.testing.assert_close(env.compute_torques(actions), kp * (default_joint_q() + 0.5 * actions - q) - kd * qd)
    env.step(actions)
    torch.testing.assert_close(env.joint_acts, kp * (default_joint_q() + 0.5 * actions - q) - kd * qd)
    torque_env = make_env("Anymal", 3)
    torque_env.control_mode = "torque"
    torque_env.set_states(states)
    scale = torch.tensor([75.0, 60.0, 12.0] * 4)
    torch.testing.assert_close(torque_env.compute_torques(actions * 2),
                               (actions * 2).clamp(-1, 1) * scale + 85.0 * (default_joint_q() - q))


def test_samplers_keep_the_release_ranges():
    """Dataset reset: height 0.65-1.0, tilt <= pi/6, joints q0 ± 0.2; RL reset: joints q0·[0.5, 1.5]; RH_HAA rate 0."""
    env = make_env("Anymal", 1)
    g = torch.Generator().manual_seed(1)
    init = env.sample_initial_states(256, g)
    assert ((init[:, 2] >= 0.65) & (init[:, 2] <= 1.0)).all() and (init[:, :2].abs() <= 0.2).all()
    assert (2 * torch.acos(init[:, 6].abs().clamp(max=1.0)) <= torch.pi / 6 + 1e-5).all()
    assert ((init[:, 7:19] - default_joint_q()).abs() <= 0.2 + 1e-6).all()
    assert (init[:, 25] == 0).all() and (init[:, 26:37].abs() <= 0.25).all()
    reset = env.sample_reset_states(256, g)
    ratio = reset[:, 7:19] / default_joint_q()
    assert ((ratio >= 0.5) & (ratio <= 1.5)).all() and (reset[:, 19:25] == 0).all()
    assert (reset[:, 25] == 0).all() and (reset[:, 26:37].abs() <= 0.1).all() and (reset[:, 26:37] != 0).all()
    gains_before = env.kp.clone()
    env.randomize_controller(g)
    assert not torch.equal(env.kp, gains_before) and (env.kp >= 30).all() and (env.kd <= 1).all()


def test_unknown_variant_and_variant_on_other_robots_are_refused():
    """A variant name outside the list, or a variant for a robot that has none, is a one-line error."""
    with pytest.raises(UserError, match="valid variants: physical, release"):
        make_env("Anymal", 1, robot_variant="faithful")
    with pytest.raises(UserError, match="applies to Anymal, CubeToss only"):
        make_env("Ant", 1, robot_variant="release")
    with pytest.raises(UserError, match="position, torque"):
        from nerd.envs.anymal import Anymal

        Anymal(1, control_mode="velocity")


def test_a_model_of_the_other_variant_is_refused(tmp_path):
    """The signature records the variant: a release-variant checkpoint loads into a release env only."""
    from nerd.checkpoint import save_checkpoint
    from nerd.features import signature_of_env
    from nerd.models.nerd_model import NeRDModel
    from nerd.neural_environment import NeuralEnvironment
    from tests.helpers import TINY

    release_env = make_env("Anymal", 1, robot_variant="release", use_graph=False)
    sig = signature_of_env(release_env)
    assert sig.robot_variant == "release"
    path = tmp_path / "release.pt"
    save_checkpoint(path, NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {"history_length": 10},
                    history_length=10)
    assert NeuralEnvironment.from_checkpoint(release_env, path).signature.robot_variant == "release"
    with pytest.raises(UserError, match="variant 'release', but the environment is the 'physical' variant"):
        NeuralEnvironment.from_checkpoint(make_env("Anymal", 1, use_graph=False), path)


def max_joint_speed_under_random_gains(gains: str, frames: int = 100, n: int = 16) -> float:
    """Largest |q̇| of the physical robot driven as data generation drives it (gains redrawn from the box ``gains``
    every frame, random actions), inf once the PD torques stop being finite."""
    env = make_env("Anymal", n)
    g = torch.Generator().manual_seed(0)
    env.reset(states=env.sample_initial_states(n, g))
    largest = 0.0
    for _ in range(frames):
        env.randomize_controller(g, gains)
        try:
            env.step(env.sample_random_actions(n, g))
        except UserError:
            return float("inf")
        largest = max(largest, env.get_states()[:, 25:].abs().max().item())
    return largest


def test_the_damped_gain_box_keeps_the_physical_robot_bounded():
    """The release's gain box, held over a frame, makes the physical robot's light shanks oscillate to hundreds of
    rad/s; our damped box keeps every env's joints below 100 rad/s, and draws inside its bounds."""
    from nerd.envs.anymal import DATA_PD_GAINS

    assert max_joint_speed_under_random_gains("release") > 100.0
    assert max_joint_speed_under_random_gains("damped") < 100.0
    env = make_env("Anymal", 64)
    env.randomize_controller(torch.Generator().manual_seed(2), "damped")
    (kp_low, kp_high), (kd_low, kd_high) = DATA_PD_GAINS["damped"]
    assert ((env.kp >= kp_low) & (env.kp <= kp_high)).all() and ((env.kd >= kd_low) & (env.kd <= kd_high)).all()


def test_gain_boxes_are_checked_when_generating(tmp_path):
    """--pd-gains names one of the robot's boxes, and only robots whose data goes through a PD law have any."""
    from nerd.generation import GenerationConfig, generate_dataset

    with pytest.raises(UserError, match="Anymal has the gain boxes release, damped"):
        generate_dataset(GenerationConfig("Anymal", 10, trajectory_length=5, num_envs=2, pd_gains="stiff"),
                         tmp_path / "a.hdf5", progress=False)
    with pytest.raises(UserError, match="Cartpole's data does not go through a PD controller"):
        generate_dataset(GenerationConfig("Cartpole", 10, trajectory_length=5, num_envs=2, pd_gains="damped"),
                         tmp_path / "c.hdf5", progress=False)
    assert not list(tmp_path.iterdir())
