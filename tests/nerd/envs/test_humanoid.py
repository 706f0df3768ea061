"""The Humanoid: the asset's body, joints and gears as imported, free fall, no hidden stabilisation, its contacts,
its controller and its samplers."""

import math
import xml.etree.ElementTree as ET

import newton.examples
import pytest
import torch

from nerd.envs import make_env
from nerd.envs.humanoid import ASSET, GEARS, HINGES, hinge_limits
from tests.helpers import com_acceleration


@pytest.fixture(scope="module")
def env():
    return make_env("Humanoid", 1, use_graph=False)


def test_hinges_limits_and_gears_are_the_assets(env):
    """21 hinges in the file's order with its limits and motor gears; 13 bodies, 40.844 kg; the model's limits."""
    root = ET.parse(newton.examples.get_asset(ASSET)).getroot()
    joints = [j for j in root.find("worldbody").iter("joint") if j.get("type", "hinge") == "hinge"]
    gears = {m.get("joint"): float(m.get("gear")) for m in root.find("actuator").iter("motor")}
    assert [(j.get("name"), *map(float, j.get("range").split())) for j in joints] == [h[:3] for h in HINGES]
    assert [gears[name] for name, *_ in HINGES] == list(GEARS)
    assert (env.bodies_per_env, env.dof_q, env.dof_qd, env.act_dim) == (13, 28, 27, 21)
    assert env.model.body_mass.numpy().sum() == pytest.approx(40.844, abs=1e-3)
    lower, upper = hinge_limits()
    torch.testing.assert_close(torch.as_tensor(env.model.joint_limit_lower.numpy()[6:]), lower)
    torch.testing.assert_close(torch.as_tensor(env.model.joint_limit_upper.numpy()[6:]), upper)
    assert env.state_names()[7] == "abdomen_z q [rad]" and env.joint_act_names()[-1] == "left_elbow [N·m]"


def test_free_fall_accelerates_the_com_at_g(env):
    """Zero torques, high in the air: the whole body's centre of mass falls at g (the joint springs are internal)."""
    states = env.sample_reset_states(1, torch.Generator().manual_seed(0))
    states[:, 2] = 5.0
    env.set_states(states)
    accel = com_acceleration(env, torch.zeros(1, 21))
    assert accel[:2].abs().max() < 0.01
    assert accel[2].item() == pytest.approx(-9.81, rel=0.01)


def test_standing_pose_falls_under_zero_torque(env):
    """Upright at rest with every hinge at 0 and no torque, the humanoid does not stay up (nothing stabilises it
    but its own torques): within 3 s its torso is below the run task's 0.8 m, and the state stays finite."""
    env.set_states(env.default_states(1))
    heights = []
    for _ in range(180):
        env.step_with_joint_act(torch.zeros(1, 21))
        heights.append(env.get_states()[0, 2].item())
    assert heights[0] > 1.25 and min(heights) < 0.8
    assert torch.isfinite(env.get_states()).all()


def test_contacts_sit_on_the_trunk_shins_feet_and_hands(env):
    """22 candidates: 2 per trunk capsule (torso body 4, lower waist 2, pelvis 2), shins 2 each, feet 4 each, hands
    1 each; standing, the feet's 8 are the ones at the ground and every other candidate is above it."""
    names = [label.rsplit("/", 1)[-1] for label in env.model.body_label]
    bodies = [names[b] for b in env.ground.candidates.body]
    counts = {name: bodies.count(name) for name in dict.fromkeys(bodies)}
    assert counts == {"torso": 4, "lower_waist": 2, "pelvis": 2, "right_shin": 2, "right_foot": 4, "left_shin": 2,
                      "left_foot": 4, "right_lower_arm": 1, "left_lower_arm": 1}
    states = env.default_states(1)
    states[:, 2] = 1.285 + 0.027  # foot capsules (radius 0.027) resting on the ground
    env.set_states(states)
    depths = env.get_contacts()["contact_depths"][0]
    feet = torch.tensor([name.endswith("_foot") for name in bodies])
    assert (depths[feet] < 0.06).all() and (depths[feet] > 0.0).all()
    assert (depths[~feet] > 0.1).all()  # the shins' lower ends: 0.14 m


def test_controller_scales_actions_by_the_gears(env):
    """τ = clamp(a, ±1) · gear."""
    actions = torch.tensor([[0.5] * 10 + [-2.0] * 11])
    expected = torch.tensor(GEARS) * torch.tensor([0.5] * 10 + [-1.0] * 11)
    torch.testing.assert_close(env.compute_torques(actions), expected[None])


def test_samplers_keep_their_stated_ranges():
    """Task reset: torso 1.34 m up, upright, at rest; hinges within ±0.2 rad and their limits; rates ±0.1 rad/s.
    Data: torso 1.3-1.6 m up within ±10 m, tilted up to π/2; hinges spread over their whole ranges."""
    env = make_env("Humanoid", 1)
    gen = torch.Generator().manual_seed(0)
    lower, upper = hinge_limits()
    reset = env.sample_reset_states(256, gen)
    torch.testing.assert_close(reset[:, :7], env.default_states(256)[:, :7])
    torch.testing.assert_close(reset[:, 28:34], torch.zeros(256, 6))
    hinges = reset[:, 7:28]
    assert (hinges.abs() <= 0.2).all() and (hinges >= lower).all() and (hinges <= upper).all()
    assert (hinges[:, 3] <= math.radians(5.0)).all() and (hinges[:, 3] > 0).any()  # right_hip_x: clamped at 5°
    assert (reset[:, 34:].abs() <= 0.1).all()
    data = env.sample_initial_states(256, gen)
    assert ((data[:, 2] >= 1.3) & (data[:, 2] <= 1.6)).all() and data[:, :2].abs().max() <= 10.0
    tilt = 2.0 * torch.acos(data[:, 6].abs().clamp(max=1.0))
    assert tilt.max() <= math.pi / 2 + 1e-5 and tilt.max() > 1.2
    hinges = data[:, 7:28]
    assert (hinges >= lower).all() and (hinges <= upper).all()
    assert (hinges.min(dim=0).values < lower + 0.1 * (upper - lower)).all()


def test_tiny_generate_train_and_evaluate(tmp_path):
    """The whole NeRD path on the humanoid at a tiny size: data with its layout, a model trained on it, and its
    passive errors (base position, orientation, joints) against the ground truth."""
    from nerd.config import from_dict
    from nerd.datasets.hdf5 import read_attrs
    from nerd.evaluation import evaluate_passive
    from nerd.generation import GenerationConfig, generate_dataset
    from nerd.training import TrainConfig, train

    for split, seed in (("train", 0), ("valid", 1)):
        generate_dataset(GenerationConfig("Humanoid", 160, trajectory_length=20, num_envs=8, seed=seed),
                         tmp_path / f"{split}.hdf5", progress=False)
    attrs = read_attrs(tmp_path / "train.hdf5")
    assert (attrs["env_name"], attrs["state_dim"], attrs["joint_act_dim"]) == ("Humanoid", 55, 21)
    cfg = from_dict(TrainConfig, {
        "env_name": "Humanoid", "num_epochs": 1, "batches_per_epoch": 4, "batch_size": 16, "valid_batches": 2,
        "model": {"type": "transformer", "transformer": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16,
                                                         "head_hidden": [16]}},
        "dataset": {"train": str(tmp_path / "train.hdf5"), "valid": str(tmp_path / "valid.hdf5")},
    })
    summary = train(cfg, tmp_path / "run", seed=0, progress=False)
    results = evaluate_passive("Humanoid", str(summary["best_checkpoint"]), "neural", num_envs=4, num_rollouts=4,
                               horizon=5, seed=500, progress=False)
    assert set(results["metrics"]) == {"base_position_error", "base_orientation_error", "joint_position_error"}
    assert all(math.isfinite(value) and value > 0 for value in results["metrics"].values())
