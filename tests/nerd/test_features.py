"""Model inputs built from the live simulator: release token widths, contact masking, spatial invariance, the
joint-limit inputs."""

import math

import numpy as np
import pytest
import torch

from nerd.envs import ENV_NAMES, env_class, make_env
from nerd.errors import UserError
from nerd.features import RobotSignature, active_contact_mask, build_inputs, signature_of_env
from nerd.frames import quat_from_axis_angle, quat_mul, quat_rotate


@pytest.mark.parametrize("name,width", [("Cartpole", 6), ("PendulumWithContact", 37), ("Ant", 215),
                                        ("CubeToss", 72), ("Humanoid", 233)])
def test_token_widths_match_the_release(name, width):
    """Per-token widths are those of the NeRD release: Cartpole 6, Pendulum 37, Ant 215; the passive cube 72
    (13 states, 8 corners x 7 contact features, gravity 3, no torque group); the Humanoid, by the Ant's layout, 233
    (55 states, 22 candidates x 7 contact features, 21 torques, gravity 3)."""
    sig = signature_of_env(make_env(name, 1))
    assert sum(sig.input_groups.values()) == width


def test_a_robot_without_torques_has_no_torque_group():
    """CubeToss has no actuator: no joint_acts group, and inputs built from (N, 0) torques leave it out."""
    env = make_env("CubeToss", 2)
    sig = signature_of_env(env)
    assert sig.joint_act_dim == 0 and "joint_acts" not in sig.input_groups
    groups, _ = build_inputs(sig, env.get_states(), env.get_root_body_q(), torch.zeros(2, 0), env.get_contacts())
    assert {k: v.shape[-1] for k, v in groups.items()} == sig.input_groups


def test_inactive_contacts_are_zeroed():
    """Candidates farther than max(4 r, 0.12 m) from the ground contribute zero features."""
    env = make_env("PendulumWithContact", 1)
    env.set_states(torch.tensor([[math.pi / 2, 0.0, 0.0, 0.0]]))  # links hang down: far ends near z = -1
    c = env.get_contacts()
    active = active_contact_mask(c["contact_depths"], c["contact_thicknesses"])
    assert active.any() and not active.all()
    groups, _ = build_inputs(signature_of_env(env), env.get_states(), env.get_root_body_q(), env.joint_acts, c)
    normals = groups["contact_normals"].view(1, 4, 3)
    assert torch.all(normals[~active] == 0) and torch.all(normals[active].norm(dim=-1) > 0.99)
    assert torch.all(groups["contact_depths"][~active] == 0)


def test_translated_and_yawed_ant_gives_identical_inputs():
    """Moving and turning the whole ant on the flat ground leaves every model input unchanged."""
    env = make_env("Ant", 2)
    base = env.sample_initial_states(1, torch.Generator().manual_seed(4))[0]
    yaw = quat_from_axis_angle(torch.tensor([0.0, 0.0, 1.0]), torch.tensor(1.1))
    moved = base.clone()
    moved[:2] += torch.tensor([2.5, -1.5])
    moved[3:7] = quat_mul(yaw, base[3:7])
    moved[15:18] = quat_rotate(yaw, base[15:18])
    moved[18:21] = quat_rotate(yaw, base[18:21])
    env.set_states(torch.stack([base, moved]))
    groups, _ = build_inputs(signature_of_env(env), env.get_states(), env.get_root_body_q(), torch.zeros(2, 8),
                             env.get_contacts())
    for name, value in groups.items():
        torch.testing.assert_close(value[0], value[1], atol=2e-5, rtol=0, msg=name)
    # A tilt is not a symmetry: gravity in the base frame changes.
    tilt = quat_from_axis_angle(torch.tensor([1.0, 0.0, 0.0]), torch.tensor(0.3))
    moved[3:7] = quat_mul(tilt, base[3:7])
    env.set_states(torch.stack([base, moved]))
    groups, _ = build_inputs(signature_of_env(env), env.get_states(), env.get_root_body_q(), torch.zeros(2, 8),
                             env.get_contacts())
    assert (groups["gravity_dir"][0] - groups["gravity_dir"][1]).abs().max() > 0.1


def test_joint_limit_inputs_read_the_penetration_and_its_rate():
    """The joint_limits group (our option) is, per limited coordinate, q beyond its limit (signed) and the rate
    there; both are 0 inside the range. The Cartpole's rail: q 4.1 m at 2 m/s -> (0.1, 2); -4.2 m at -1 m/s ->
    (-0.2, -1); 3.9 m at 5 m/s -> (0, 0). The release's token stays as it was when the option is off."""
    env = make_env("Cartpole", 3)
    sig = signature_of_env(env, joint_limit_inputs=True)
    assert sig.joint_limits == ((0, -4.0, 4.0),)
    assert sig.input_groups == {"states": 4, "joint_acts": 2, "joint_limits": 2}
    assert "joint_limits" not in signature_of_env(env).input_groups
    states = torch.tensor([[4.1, 0.3, 2.0, 0.5], [-4.2, 0.0, -1.0, 0.0], [3.9, 1.0, 5.0, 1.0]])
    groups, _ = build_inputs(sig, states, env.get_root_body_q(), torch.zeros(3, 2))
    torch.testing.assert_close(groups["joint_limits"], torch.tensor([[0.1, 2.0], [-0.2, -1.0], [0.0, 0.0]]))
    torch.testing.assert_close(groups["states"], states)


def test_joint_limits_ride_in_the_signature_and_only_where_declared():
    """A signature with limits round-trips through its dict form; one without leaves the key out (datasets'
    attributes unchanged) and reads back as none; a robot that declares no limits refuses the option."""
    env = make_env("Cartpole", 1)
    sig = signature_of_env(env, joint_limit_inputs=True)
    assert RobotSignature.from_dict(sig.to_dict()) == sig
    plain = signature_of_env(env)
    assert "joint_limits" not in plain.to_dict() and RobotSignature.from_dict(plain.to_dict()) == plain
    with pytest.raises(UserError, match="joint_limit_inputs: PendulumWithContact declares no joint limits"):
        signature_of_env(make_env("PendulumWithContact", 1), joint_limit_inputs=True)
    with pytest.raises(UserError, match=r"joint_limits \(\(0, -4.0, 4.0\),\) vs \(\)"):
        sig.check_compatible(plain)


def test_joint_limit_lookahead_reads_the_penetration_one_frame_ahead():
    """The joint_limit_lookahead group (our option) is the joint_limits group of q + q̇ Δt, Δt = the frame (1/60 s
    for the Cartpole): 3.95 m at 6 m/s will be 4.05 m -> (0.05, 6) while its penetration is still (0, 0); 4.1 m
    at -12 m/s will be back at 3.9 m -> (0, 0) while it is (0.1, -12); -3.99 m at -1.2 m/s -> (-0.01, -1.2)."""
    env = make_env("Cartpole", 3)
    sig = signature_of_env(env, joint_limit_inputs=True, joint_limit_lookahead=True)
    assert sig.joint_limit_lookahead == env.frame_dt == pytest.approx(1 / 60)
    assert sig.input_groups == {"states": 4, "joint_acts": 2, "joint_limits": 2, "joint_limit_lookahead": 2}
    states = torch.tensor([[3.95, 0.3, 6.0, 0.5], [4.1, 0.0, -12.0, 0.0], [-3.99, 1.0, -1.2, 1.0]])
    groups, _ = build_inputs(sig, states, env.get_root_body_q(), torch.zeros(3, 2))
    torch.testing.assert_close(groups["joint_limits"], torch.tensor([[0.0, 0.0], [0.1, -12.0], [0.0, 0.0]]))
    torch.testing.assert_close(groups["joint_limit_lookahead"],
                               torch.tensor([[0.05, 6.0], [0.0, 0.0], [-0.01, -1.2]]))
    assert RobotSignature.from_dict(sig.to_dict()) == sig
    assert "joint_limit_lookahead" not in signature_of_env(env, joint_limit_inputs=True).to_dict()
    with pytest.raises(UserError, match="joint_limit_lookahead needs joint_limit_inputs"):
        signature_of_env(env, joint_limit_lookahead=True)
    with pytest.raises(UserError, match=r"joint_limit_lookahead 0.01666\d* vs 0.0"):
        sig.check_compatible(signature_of_env(env, joint_limit_inputs=True))


@pytest.mark.parametrize("name", [name for name in ENV_NAMES if env_class(name).joint_limits])
def test_declared_joint_limits_are_the_built_ones(name):
    """Environment.joint_limits, which training reads without building the robot, are the limits in its model."""
    env = make_env(name, 1)
    lower, upper = env.model.joint_limit_lower.numpy(), env.model.joint_limit_upper.numpy()
    starts = env.model.joint_q_start.numpy()
    qd_starts = env.model.joint_qd_start.numpy()
    assert env.joint_limits
    for q_index, low, high in env.joint_limits:
        joint = int(np.searchsorted(starts, q_index, side="right")) - 1
        dof = int(qd_starts[joint]) + q_index - int(starts[joint])
        assert (lower[dof], upper[dof]) == pytest.approx((low, high))
