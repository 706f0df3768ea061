"""The ablation study's model options (paper, appendix "Ablation Study"): input frame, contact inputs, absolute
prediction, normalisation, history length. Their input and target layouts, what they are invariant to, the round
trip of the absolute target, how checkpoints record them, and a tiny training run that steps."""

from dataclasses import replace

import pytest
import torch

from nerd.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from nerd.config import ConfigError, from_dict
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.features import (
    RobotSignature,
    apply_targets,
    build_inputs,
    build_targets,
    signature_of_env,
    with_model_options,
)
from nerd.frames import quat_from_axis_angle, quat_mul, quat_normalize
from nerd.models import ModelConfig
from nerd.models.nerd_model import NeRDModel
from nerd.training import TrainConfig, check_resume_config

C = 3  # contact candidates of the synthetic robots below
ANT_LIKE = RobotSignature(env_name="Ant", dof_q=15, dof_qd=14, floating_base=True, continuous_q_indices=(),
                          states_frame="body", contact_count=C, joint_act_dim=8)
"""An Ant-shaped signature (free base, 8 hinges, body frame) with only a few contact candidates."""
PENDULUM_LIKE = RobotSignature(env_name="PendulumWithContact", dof_q=2, dof_qd=2, floating_base=False,
                               continuous_q_indices=(0, 1), states_frame="body", contact_count=C, joint_act_dim=2)
"""A fixed-base body-frame robot with continuous joints (the double pendulum's shape)."""
TINY_MODEL = {"type": "transformer",
              "transformer": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "head_hidden": [16]}}

E2E = {"input_frame": "world", "contact_inputs": False}
WORLD = {"input_frame": "world"}
ABSOLUTE = {"prediction": "absolute"}


def ant_states(n: int, gen: torch.Generator) -> torch.Tensor:
    """(n, 29) random Ant-shaped world states: a unit base quaternion, a base 0.5 m up."""
    s = torch.randn(n, 29, generator=gen, dtype=torch.float64)
    s[:, 2] = 0.5
    s[:, 3:7] = quat_normalize(s[:, 3:7])
    return s


def contacts(n: int, gen: torch.Generator, offset: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Active world-frame contacts of n envs (ground points shifted by ``offset``)."""
    points = torch.randn(n, C, 3, generator=gen, dtype=torch.float64)
    if offset is not None:
        points = points + offset
    normals = torch.zeros(n, C, 3, dtype=torch.float64)
    normals[..., 2] = 1.0
    return {"contact_points_1": points, "contact_normals": normals,
            "contact_depths": torch.full((n, C), 0.01, dtype=torch.float64),
            "contact_thicknesses": torch.full((n, C), 0.02, dtype=torch.float64)}


@pytest.mark.parametrize("options,groups,target", [
    ({}, {"states": 29, "contact_normals": 3 * C, "contact_points_1": 3 * C, "contact_depths": C, "joint_acts": 8,
          "gravity_dir": 3}, 29),
    (E2E, {"states": 29, "joint_acts": 8}, 29),
    (WORLD, {"states": 29, "contact_normals": 3 * C, "contact_points_1": 3 * C, "contact_depths": C,
             "joint_acts": 8}, 29),
    ({"contact_inputs": False}, {"states": 29, "joint_acts": 8, "gravity_dir": 3}, 29),
    (ABSOLUTE, {"states": 29, "contact_normals": 3 * C, "contact_points_1": 3 * C, "contact_depths": C,
                "joint_acts": 8, "gravity_dir": 3}, 29),
])
def test_input_and_target_layouts(options, groups, target):
    """Each option's token groups and widths (the world frame drops the then constant gravity direction, E2E the
    contacts too) and its target width; the built inputs and targets have exactly those widths."""
    sig = replace(ANT_LIKE, **options)
    assert sig.input_groups == groups and sig.target_dim == target
    gen = torch.Generator().manual_seed(0)
    s0, s1 = ant_states(4, gen), ant_states(4, gen)
    built, anchor = build_inputs(sig, s0, None, torch.zeros(4, 8, dtype=torch.float64), contacts(4, gen))
    assert {k: v.shape[-1] for k, v in built.items()} == groups
    assert build_targets(sig, s0, s1, anchor).shape == (4, target)


def test_e2e_sees_no_contact_inputs():
    """The E2E model's inputs are the state and the torques: any contacts (or none at all) give the same token."""
    sig = replace(ANT_LIKE, **E2E)
    gen = torch.Generator().manual_seed(1)
    s, tau = ant_states(3, gen), torch.randn(3, 8, generator=gen, dtype=torch.float64)
    a, _ = build_inputs(sig, s, None, tau, contacts(3, gen))
    b, _ = build_inputs(sig, s, None, tau, None)
    assert set(a) == {"states", "joint_acts"}
    for name in a:
        torch.testing.assert_close(a[name], b[name])


def translated(s: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The same Ant state moved by ``offset`` (3,) [m]."""
    moved = s.clone()
    moved[:, :3] += offset
    return moved


@pytest.mark.parametrize("options,invariant", [({}, True), (ABSOLUTE, True), (WORLD, False), (E2E, False)])
def test_robot_frame_inputs_are_invariant_to_a_translation_and_world_frame_ones_are_not(options, invariant):
    """A robot and its translated copy (contacts moved with it) give the same robot-centric inputs and targets; in
    the world frame the state (and the contact points) differ."""
    sig = replace(ANT_LIKE, **options)
    gen = torch.Generator().manual_seed(2)
    s0 = ant_states(2, gen)
    s1 = s0 + 0.01 * torch.randn(s0.shape, generator=gen, dtype=torch.float64)
    s1[:, 3:7] = quat_normalize(s1[:, 3:7])
    tau = torch.randn(2, 8, generator=gen, dtype=torch.float64)
    offset = torch.tensor([3.0, -2.0, 0.0], dtype=torch.float64)
    c = contacts(2, torch.Generator().manual_seed(3))
    c_moved = contacts(2, torch.Generator().manual_seed(3), offset)
    a, anchor_a = build_inputs(sig, s0, None, tau, c)
    b, anchor_b = build_inputs(sig, translated(s0, offset), None, tau, c_moved)
    same = all(torch.allclose(a[k], b[k], atol=1e-9) for k in a)
    assert same is invariant
    if not invariant:
        assert not torch.allclose(a["states"], b["states"])
    targets_a = build_targets(sig, s0, s1, anchor_a)
    targets_b = build_targets(sig, translated(s0, offset), translated(s1, offset), anchor_b)
    # A relative target is invariant in any frame (a difference of positions); an absolute one in the robot's only.
    assert torch.allclose(targets_a, targets_b, atol=1e-9) is (invariant or sig.prediction == "relative")


def test_the_pendulums_robot_frame_turns_with_its_first_joint():
    """The pendulum's anchor is its first moving link (the spec's robot frame of a fixed-base robot), so its frame
    and the world differ by a rotation that follows joint 0, not by a constant: NeRD's gravity input is
    (sin q0, 0, -cos q0), joint 0's angle as a direction, which the world frame (gravity constant, left out) lacks.
    This is what the ablation's world-frame variant of the pendulum removes (studies/ablation/README.md)."""
    env = make_env("PendulumWithContact", 4)
    q0 = torch.tensor([0.0, 0.5, -2.0, 3.0])
    states = torch.stack([q0, torch.full((4,), 0.3), torch.zeros(4), torch.zeros(4)], dim=1)
    env.set_states(states)
    robot = signature_of_env(env)
    got, anchor = build_inputs(robot, env.get_states(), env.get_root_body_q(), torch.zeros(4, 2), env.get_contacts())
    expected = torch.stack([q0.sin(), torch.zeros(4), -q0.cos()], dim=1)
    torch.testing.assert_close(got["gravity_dir"], expected, atol=1e-5, rtol=0)
    world, _ = build_inputs(replace(robot, **WORLD), env.get_states(), env.get_root_body_q(), torch.zeros(4, 2),
                            env.get_contacts())
    assert "gravity_dir" not in world
    # The joint coordinates themselves are frame-free: both frames see the same (wrapped) angles and rates.
    torch.testing.assert_close(world["states"], got["states"])


@pytest.mark.parametrize("sig", [ANT_LIKE, replace(ANT_LIKE, **WORLD), PENDULUM_LIKE, replace(PENDULUM_LIKE, **WORLD)],
                         ids=["ant", "ant-world", "pendulum", "pendulum-world"])
def test_absolute_target_is_the_next_state_and_integrates_back_to_it(sig):
    """The absolute target is the next state (expressed in the inputs' frame); applying it gives the next state back:
    the quaternion normalised and in the hemisphere of the current one, continuous joints continued without a 2π
    jump."""
    sig = replace(sig, prediction="absolute")
    gen = torch.Generator().manual_seed(5)
    n = 6
    if sig.floating_base:
        s0 = ant_states(n, gen)
        rotation = quat_from_axis_angle(torch.randn(n, 3, generator=gen, dtype=torch.float64),
                                        0.1 * torch.ones(n, dtype=torch.float64))
        s1 = s0 + 0.02 * torch.randn(s0.shape, generator=gen, dtype=torch.float64)
        s1[:, 3:7] = quat_mul(rotation, s0[:, 3:7])
        root = None
    else:
        s0 = torch.randn(n, 4, generator=gen, dtype=torch.float64)
        s0[:, :2] += 6.0  # unwrapped angles, as the engine keeps them
        s1 = s0 + 0.02 * torch.randn(s0.shape, generator=gen, dtype=torch.float64)
        root = torch.zeros(n, 7, dtype=torch.float64)
        root[:, 3:7] = quat_from_axis_angle(torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand(n, 3), s0[:, 0])
    _, anchor = build_inputs(sig, s0, root, torch.zeros(n, sig.joint_act_dim, dtype=torch.float64),
                             contacts(n, gen))
    target = build_targets(sig, s0, s1, anchor)
    if sig.model_frame == "world" and not sig.floating_base:
        # In the world frame a fixed-base robot's absolute target is the next state itself (angles wrapped).
        torch.testing.assert_close(target[:, 2:], s1[:, 2:])
        torch.testing.assert_close(torch.remainder(target[:, :2] - s1[:, :2] + torch.pi, 2 * torch.pi) - torch.pi,
                                   torch.zeros(n, 2, dtype=torch.float64), atol=1e-12, rtol=0)
    elif sig.floating_base and sig.model_frame == "world":
        torch.testing.assert_close(target[:, 7:], s1[:, 7:])
        torch.testing.assert_close(target[:, :3], s1[:, :3])
    next_states = apply_targets(sig, s0, target, anchor)
    torch.testing.assert_close(next_states, s1, atol=1e-10, rtol=0)
    # The relative target of the same transition differs: the options are not the same model.
    relative = build_targets(replace(sig, prediction="relative"), s0, s1, anchor)
    assert not torch.allclose(relative, target)


def test_checkpoint_records_its_options_and_refuses_a_mismatched_configuration(tmp_path):
    """The options ride in the checkpoint (signature and model config); NeRD's own leave the signature as it was;
    a configuration with other options is refused with one line naming the option."""
    cfg = from_dict(ModelConfig, {**TINY_MODEL, **E2E, **ABSOLUTE, "normalize_outputs": False})
    sig = with_model_options(ANT_LIKE, cfg)
    model = NeRDModel(sig.input_groups, sig.target_dim, cfg)
    path = save_checkpoint(tmp_path / "e2e.pt", model, sig, {}, history_length=10)
    loaded, loaded_sig, payload = load_checkpoint(path)
    assert loaded_sig == sig and loaded_sig.prediction == "absolute" and loaded_sig.input_frame == "world"
    assert not loaded_sig.contact_inputs and loaded.cfg.normalize_outputs is False
    assert payload["signature"]["prediction"] == "absolute"
    # NeRD's own options are left out of the signature: older checkpoints and datasets mean the same.
    plain = save_checkpoint(tmp_path / "nerd.pt", NeRDModel(ANT_LIKE.input_groups, 29, ModelConfig()), ANT_LIKE, {},
                            history_length=10)
    assert not {"input_frame", "contact_inputs", "prediction"} & set(read_checkpoint(plain)["signature"])
    assert RobotSignature.from_dict(ANT_LIKE.to_dict()) == ANT_LIKE
    # A configuration asking for NeRD's options: one line, naming what differs.
    with pytest.raises(UserError, match=r"model\.prediction 'absolute' \(not 'relative'\)") as err:
        loaded_sig.check_compatible(ANT_LIKE)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"model\.prediction absolute -> relative"):
        train_cfg = from_dict(TrainConfig, {"env_name": "Ant", "dataset": {"train": "data.hdf5"},
                                            "model": {**TINY_MODEL, **E2E, "normalize_outputs": False}})
        check_resume_config(train_cfg, loaded.cfg, payload | {"config": {"dataset": {"train": "data.hdf5"}}})
    # A signature that disagrees with its model is never written.
    with pytest.raises(UserError, match="model options"):
        save_checkpoint(tmp_path / "bad.pt", model, replace(sig, prediction="relative"), {}, history_length=10)


def test_no_normalisation_keeps_the_identity_statistics():
    """Without input (output) normalisation the model's input (target) statistics stay the identity."""
    gen = torch.Generator().manual_seed(6)
    inputs = {"states": 5.0 + 3.0 * torch.randn(100, 4, generator=gen)}
    target = 2.0 + torch.randn(100, 2, generator=gen)
    for flags in ({"normalize_inputs": False}, {"normalize_outputs": False}):
        model = NeRDModel({"states": 4}, 2, from_dict(ModelConfig, {**TINY_MODEL, **flags}))
        model.update_statistics(inputs, target)
        mean, std = model.token_statistics()
        inputs_identity = torch.allclose(mean, torch.zeros(4)) and torch.allclose(std, torch.ones(4))
        target_identity = torch.allclose(model.target_norm.mean.float(), torch.zeros(2))
        assert inputs_identity is (not flags.get("normalize_inputs", True))
        assert target_identity is (not flags.get("normalize_outputs", True))


def test_options_are_validated_config_keys():
    """An unknown value or a wrong type names its key; history 20 needs a block size to match."""
    base = {"env_name": "PendulumWithContact", "model": dict(TINY_MODEL)}
    with pytest.raises(ConfigError, match=r"model\.prediction"):
        from_dict(TrainConfig, {**base, "model": {**TINY_MODEL, "prediction": "absolutely"}})
    with pytest.raises(ConfigError, match=r"model\.contact_inputs"):
        from_dict(TrainConfig, {**base, "model": {**TINY_MODEL, "contact_inputs": "no"}})
    with pytest.raises(ConfigError, match=r"model\.input_frme"):
        from_dict(TrainConfig, {**base, "model": {**TINY_MODEL, "input_frme": "world"}})
    with pytest.raises(ConfigError, match="block_size"):
        from_dict(TrainConfig, {**base, "history_length": 20})
    long = from_dict(TrainConfig, {**base, "history_length": 20,
                                   "model": {**TINY_MODEL, "transformer": {**TINY_MODEL["transformer"],
                                                                           "block_size": 20}}})
    assert long.history_length == long.model.transformer.block_size == 20


def test_a_tiny_variant_run_makes_a_checkpoint_that_steps(tmp_path):
    """A few seconds of training an absolute-prediction, world-frame pendulum give a checkpoint that states its
    options and steps in NeuralEnvironment with them."""
    from nerd.envs import make_env
    from nerd.generation import GenerationConfig, generate_dataset
    from nerd.neural_environment import NeuralEnvironment
    from nerd.training import train

    for split, seed in (("train", 0), ("valid", 1)):
        generate_dataset(GenerationConfig("PendulumWithContact", 600, trajectory_length=30, num_envs=20, seed=seed),
                         tmp_path / f"{split}.hdf5", progress=False)
    cfg = from_dict(TrainConfig, {
        "env_name": "PendulumWithContact", "model": {**TINY_MODEL, **WORLD, **ABSOLUTE}, "num_epochs": 1,
        "batches_per_epoch": 5, "batch_size": 32, "valid_batches": 2,
        "dataset": {"train": str(tmp_path / "train.hdf5"), "valid": str(tmp_path / "valid.hdf5")},
        "rollout_eval": {"num_envs": 2, "horizon": 5},
    })
    summary = train(cfg, tmp_path / "run", seed=0, progress=False)
    _, sig, _ = load_checkpoint(summary["best_checkpoint"])
    assert (sig.prediction, sig.input_frame) == ("absolute", "world") and "gravity_dir" not in sig.input_groups
    nenv = NeuralEnvironment.from_checkpoint(make_env("PendulumWithContact", 3), summary["best_checkpoint"])
    assert nenv.integrator.signature.prediction == "absolute"
    nenv.reset(generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        nenv.step_with_joint_act(torch.zeros(3, 2))
    assert torch.isfinite(nenv.get_states()).all()
