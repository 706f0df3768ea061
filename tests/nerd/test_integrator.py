"""NeRDIntegrator and NeuralEnvironment: integration pipeline, per-env history, interface equality."""

import pytest
import torch

from nerd.datasets.windows import TrajectoryWindows
from nerd.envs import make_env
from nerd.features import build_inputs, build_targets, signature_of_env
from nerd.generation import GenerationConfig, generate_dataset
from nerd.models.nerd_model import NeRDModel
from nerd.neural_environment import NeuralEnvironment
from tests.helpers import TINY, tiny_model, tiny_neural_env


@pytest.mark.parametrize("name", ["Cartpole", "PendulumWithContact", "Ant", "CubeToss"])
def test_perfect_predictor_reproduces_ground_truth(name):
    """With the model replaced by the exact ground-truth target, neural rollouts equal ground-truth rollouts."""
    n, steps = 3, 15
    gen = torch.Generator().manual_seed(1)
    gt_env = make_env(name, n)
    nenv = tiny_neural_env(name, n)
    start = gt_env.sample_initial_states(n, gen)
    torques = [gt_env.sample_random_torques(n, gen) for _ in range(steps)]
    gt_env.set_states(start)
    nenv.reset(states=start)
    sig = signature_of_env(gt_env)
    for tau in torques:
        s0, root = gt_env.get_states(), gt_env.get_root_body_q()
        _, anchor = build_inputs(sig, s0, root, tau, gt_env.get_contacts())
        gt_env.step_with_joint_act(tau)
        exact = build_targets(sig, s0, gt_env.get_states(), anchor)
        nenv.integrator.predict_targets = lambda exact=exact: exact
        nenv.step_with_joint_act(tau)
        torch.testing.assert_close(nenv.get_states(), gt_env.get_states(), atol=2e-4, rtol=1e-4)
    # Body poses and contacts were refreshed from the integrated state too.
    torch.testing.assert_close(nenv.get_root_body_q(), gt_env.get_root_body_q(), atol=2e-4, rtol=0)
    if nenv.contact_count:
        torch.testing.assert_close(nenv.get_contacts()["contact_depths"], gt_env.get_contacts()["contact_depths"],
                                   atol=2e-4, rtol=0)


def test_neural_inputs_match_the_contact_environment_features():
    """The integrator rebuilds, from Newton's contact set, exactly the features the environment reports."""
    nenv = tiny_neural_env("Ant", 2)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    groups, _, _ = nenv.integrator.current_inputs(nenv.env.state_0, nenv.env.control, nenv.env.contacts)
    expected, _ = build_inputs(nenv.signature, nenv.get_states(), nenv.get_root_body_q(), nenv.env.joint_acts,
                               nenv.get_contacts())
    for name in expected:
        torch.testing.assert_close(groups[name], expected[name], atol=1e-5, rtol=0)


def test_neural_joint_limit_inputs_match_the_dataset_windows(tmp_path):
    """A model with both joint-limit groups (our options) sees in neural mode the tokens its training windows hold
    for the same states: the live environment and the dataset (its frame_dt) build the same look-ahead."""
    generate_dataset(GenerationConfig("Cartpole", 640, trajectory_length=40, num_envs=16, seed=3,
                                      initial_states="limits"), tmp_path / "d.hdf5", progress=False)
    windows = TrajectoryWindows(tmp_path / "d.hdf5", 10, joint_limits=((0, -4.0, 4.0),), joint_limit_lookahead=True)
    inputs, _ = windows.get_batch(torch.arange(len(windows)))
    env = make_env("Cartpole", len(windows))
    sig = signature_of_env(env, joint_limit_inputs=True, joint_limit_lookahead=True)
    assert windows.signature == sig
    nenv = NeuralEnvironment(env, NeRDModel(sig.input_groups, sig.target_dim, TINY))
    assert nenv.signature == sig
    step = inputs["states"][:, -1]  # world-frame robot: the state inputs are the states
    nenv.reset(states=step)
    groups, _, _ = nenv.integrator.current_inputs(env.state_0, env.control, env.contacts)
    for name in ("joint_limits", "joint_limit_lookahead"):
        torch.testing.assert_close(groups[name], inputs[name][:, -1], atol=1e-6, rtol=0)
    # The limits data reaches beyond the stops, and one frame ahead of it before it does.
    beyond, ahead = inputs["joint_limits"][:, -1, 0] != 0, inputs["joint_limit_lookahead"][:, -1, 0] != 0
    assert beyond.any() and (ahead & ~beyond).any()


def test_reset_clears_only_the_reset_envs_history():
    """After reset(env_ids=[1]) env 1 restarts its history at one token; the others keep theirs."""
    nenv = tiny_neural_env("PendulumWithContact", 3)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    zero = torch.zeros(3, 2)
    for _ in range(4):
        nenv.step_with_joint_act(zero)
    assert nenv.integrator.history_count.tolist() == [4, 4, 4]
    nenv.reset(env_ids=[1], generator=torch.Generator().manual_seed(1))
    nenv.step_with_joint_act(zero)
    assert nenv.integrator.history_count.tolist() == [5, 1, 5]
    for _ in range(10):
        nenv.step_with_joint_act(zero)
    assert nenv.integrator.history_count.tolist() == [10, 10, 10]


def test_batched_histories_of_different_lengths_predict_as_if_alone():
    """An env's prediction does not depend on the other envs' history lengths (left-aligned causal batch)."""
    gen = torch.Generator().manual_seed(2)
    together = tiny_neural_env("PendulumWithContact", 2)
    together.integrator.chunk_envs = 1  # one network call per env: the CPU's chunked path (256 envs a call)
    alone = NeuralEnvironment(make_env("PendulumWithContact", 1), together.integrator.nerd_model)
    start = together.env.sample_initial_states(2, gen)
    together.reset(states=start)
    for _ in range(3):
        together.step_with_joint_act(torch.zeros(2, 2))
    together.reset(env_ids=[1], states=start[1:])
    alone.reset(states=start[1:])
    for _ in range(4):
        together.step_with_joint_act(torch.zeros(2, 2))
        alone.step_with_joint_act(torch.zeros(1, 2))
        torch.testing.assert_close(together.get_states()[1:], alone.get_states(), atol=1e-5, rtol=1e-5)


def test_modes_share_one_interface_and_switch_mid_rollout():
    """Both modes take the same calls and return the same shapes; switching keeps the state continuous."""
    nenv = tiny_neural_env("Ant", 2, env_mode="ground-truth")
    nenv.reset(states=nenv.env.default_states(2))
    shapes = {}
    for mode in ("ground-truth", "neural", "ground-truth"):
        nenv.set_env_mode(mode)
        before = nenv.get_states()
        nenv.step(torch.zeros(2, 8))
        after = nenv.get_states()
        contacts = nenv.get_contacts()
        shapes.setdefault("states", after.shape)
        assert after.shape == shapes["states"] and contacts["contact_depths"].shape == (2, 25)
        assert not torch.equal(before, after)
    # The history was recorded in ground-truth mode too.
    assert nenv.integrator.history_count.tolist() == [3, 3]
    with pytest.raises(ValueError, match="valid modes"):
        nenv.set_env_mode("analytic")


def test_neural_mode_without_model_is_an_error():
    """Asking for neural mode without a model is a clear ValueError."""
    with pytest.raises(ValueError, match="needs a NeRD model"):
        NeuralEnvironment(make_env("Cartpole", 1), None, "neural")


def test_wrong_frame_dt_is_refused():
    """The integrator predicts whole training frames and refuses another dt."""
    nenv = tiny_neural_env("Cartpole", 1)
    env = nenv.env
    with pytest.raises(ValueError, match="whole frames"):
        nenv.integrator.step(env.state_0, env.state_0, env.control, env.contacts, 0.001)


def test_non_finite_prediction_stops_the_rollout():
    """A NaN prediction raises RolloutDivergedError naming the env instead of corrupting the state."""
    from nerd.errors import RolloutDivergedError

    nenv = tiny_neural_env("Cartpole", 2)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    nenv.integrator.predict_targets = lambda: torch.tensor([[0.0, 0.0, 0.0, 0.0], [float("nan"), 0.0, 0.0, 0.0]])
    before = nenv.get_states()
    with pytest.raises(RolloutDivergedError, match=r"envs \[1\]"):
        nenv.step(torch.zeros(2, 1))
    torch.testing.assert_close(nenv.get_states(), before)


def test_non_finite_torques_are_refused_in_neural_mode_by_the_integrators_check():
    """With the integrator's NaN check on, the environment leaves the torque check to it (one host sync per
    step): NaN torques still raise the environment's error and leave the state as it was."""
    nenv = tiny_neural_env("Cartpole", 2)
    nenv.reset(generator=torch.Generator().manual_seed(0))
    before = nenv.get_states()
    with pytest.raises(ValueError, match="NaN or inf"):
        nenv.step(torch.tensor([[0.0], [float("nan")]]))
    torch.testing.assert_close(nenv.get_states(), before)
    nenv.integrator.set_nan_check(False)  # then the environment checks them itself
    with pytest.raises(ValueError, match="NaN or inf"):
        nenv.step(torch.tensor([[float("nan")], [0.0]]))
    torch.testing.assert_close(nenv.get_states(), before)


def test_same_robot_with_another_layout_is_refused():
    """A signature with the same robot name but another contact layout is refused, listing what differs."""
    import dataclasses

    sig = signature_of_env(make_env("PendulumWithContact", 1))
    other = dataclasses.replace(sig, contact_count=8)
    with pytest.raises(ValueError, match="contact_count 4 vs 8"):
        sig.check_compatible(other)


@pytest.mark.parametrize("name, trained, used", [("Anymal", "release", "physical"), ("CubeToss", "sim", "real")])
def test_a_model_of_another_variant_is_refused_unless_the_variants_are_interchangeable(tmp_path, name, trained, used):
    """Anymal's variants are different robot models: a checkpoint of one is refused by an env of the other. CubeToss's
    are the same cube under other contact physics (robot_variants_interchangeable): its sim-trained model loads into
    the "real" env (the fine-tuning demo), while the checkpoint still records the variant it was trained on; a
    layout change is refused there too."""
    import dataclasses

    from nerd.checkpoint import load_checkpoint, save_checkpoint

    sig = signature_of_env(make_env(name, 1, robot_variant=trained, use_graph=False))
    path = tmp_path / "model.pt"
    save_checkpoint(path, NeRDModel(sig.input_groups, sig.target_dim, TINY), sig, {}, history_length=2)
    env = make_env(name, 1, robot_variant=used, use_graph=False)
    assert load_checkpoint(path)[1].robot_variant == trained
    if name == "Anymal":
        assert not env.robot_variants_interchangeable
        with pytest.raises(ValueError, match=f"variant '{trained}', but the environment is the '{used}' variant"):
            NeuralEnvironment.from_checkpoint(env, path)
    else:
        assert env.robot_variants_interchangeable
        assert NeuralEnvironment.from_checkpoint(env, path).signature.robot_variant == used
        with pytest.raises(ValueError, match="contact_count 8 vs 4"):
            sig.check_compatible(dataclasses.replace(signature_of_env(env), contact_count=4))


def test_reset_forgets_non_finite_tokens_of_the_old_episode():
    """A NaN state recorded before a per-env reset does not leak into the new episode's predictions."""
    nenv = tiny_neural_env("Cartpole", 2, env_mode="ground-truth")
    nenv.reset(states=torch.tensor([[0.0, 0.1, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    for _ in range(3):
        # A force the solver cannot integrate drives env 1's ground truth to non-finite states, whose tokens the
        # history records (unchecked, as the RL loop steps).
        nenv.step_with_joint_act(torch.tensor([[0.0, 0.0], [1e30, 0.0]]), check_finite=False)
    assert not torch.isfinite(nenv.get_states()[1]).all()
    nenv.reset(env_ids=[1], states=torch.zeros(1, 4))
    nenv.set_env_mode("neural")
    nenv.step(torch.zeros(2, 1))
    assert torch.isfinite(nenv.get_states()[1]).all()


def test_history_longer_than_the_model_context_is_refused():
    """A history longer than the transformer's block_size is an error, not silently clamped."""
    env = make_env("Cartpole", 1)
    sig = signature_of_env(env)
    with pytest.raises(ValueError, match=r"history_length must lie in \[1, 16\]"):
        NeuralEnvironment(env, NeRDModel(sig.input_groups, sig.target_dim, TINY), history_length=17)


@pytest.mark.parametrize("name", ["Cartpole", "Ant"])
def test_ensemble_steps_with_the_mean_of_its_members_targets(name):
    """Members predicting the exact target plus and minus an offset step exactly like the ground truth: the ensemble
    applies their mean (for the Ant's free base too, where the mean rotation is renormalised)."""
    n, steps = 3, 8
    gen = torch.Generator().manual_seed(4)
    gt_env = make_env(name, n)
    env = make_env(name, n)
    options = {"joint_limit_inputs": True, "joint_limit_lookahead": True} if name == "Cartpole" else {}
    nenv = NeuralEnvironment(env, [tiny_model(env, 0), tiny_model(env, 1, **options)])
    plain, other = nenv.integrator.members
    start = gt_env.sample_initial_states(n, gen)
    gt_env.set_states(start)
    nenv.reset(states=start)
    sig = signature_of_env(gt_env)
    for _ in range(steps):
        tau = gt_env.sample_random_torques(n, gen)
        s0 = gt_env.get_states()
        _, anchor = build_inputs(sig, s0, gt_env.get_root_body_q(), tau, gt_env.get_contacts())
        gt_env.step_with_joint_act(tau)
        exact = build_targets(sig, s0, gt_env.get_states(), anchor)
        offset = 0.05 * torch.randn(exact.shape, generator=gen)
        plain.predict_targets = lambda exact=exact, offset=offset: exact + offset
        other.predict_targets = lambda exact=exact, offset=offset: exact - offset
        nenv.step_with_joint_act(tau)
        torch.testing.assert_close(nenv.get_states(), gt_env.get_states(), atol=2e-4, rtol=1e-4)
    # Alone, one member's offset moves the state away from the ground truth: the test can fail.
    plain.predict_targets = lambda: exact + offset
    nenv.integrator.members = [plain]
    nenv.set_states(start)
    nenv.step_with_joint_act(tau)
    assert (nenv.get_states() - gt_env.get_states()).abs().max() > 1e-3


def test_ensemble_members_keep_their_own_inputs_and_histories():
    """Members with different input groups each record their own tokens; a reset clears every member's history of
    the reset envs only; a single model is a plain integrator, not an ensemble of one."""
    from nerd.integrator import NeRDEnsembleIntegrator, NeRDIntegrator

    env = make_env("Cartpole", 3)
    nenv = NeuralEnvironment(env, [tiny_model(env, 0), tiny_model(env, 1, joint_limit_inputs=True,
                                                                  joint_limit_lookahead=True)], "ground-truth")
    assert isinstance(nenv.integrator, NeRDEnsembleIntegrator)
    plain, limits = nenv.integrator.members
    assert "joint_limit_lookahead" not in plain.signature.input_groups
    assert "joint_limit_lookahead" in limits.signature.input_groups and nenv.signature == plain.signature
    nenv.reset(states=torch.tensor([[3.9, 0.3, 0.0, 0.0], [0.0, 0.1, 0.0, 0.0], [-3.9, 0.0, -1.0, 0.0]]))
    for mode in ("ground-truth", "neural", "neural"):
        nenv.set_env_mode(mode)
        nenv.step(torch.zeros(3, 1))
    assert plain.history_count.tolist() == limits.history_count.tolist() == [3, 3, 3]
    assert plain._tokens.shape[-1] + 4 == limits._tokens.shape[-1]
    nenv.reset(env_ids=[1], states=torch.zeros(1, 4))
    assert plain.history_count.tolist() == limits.history_count.tolist() == [3, 0, 3]
    assert type(NeuralEnvironment(env, [tiny_model(env, 0)]).integrator) is NeRDIntegrator


def test_ensemble_of_another_robot_or_environment_is_refused(tmp_path):
    """Checkpoints of two robots cannot form an ensemble (the second is checked against the env like the first), nor
    can integrators of two environments."""
    from nerd.checkpoint import save_checkpoint
    from nerd.integrator import NeRDEnsembleIntegrator

    paths = []
    for name in ("Cartpole", "PendulumWithContact"):
        sig = signature_of_env(make_env(name, 1))
        paths.append(save_checkpoint(tmp_path / f"{name}.pt", NeRDModel(sig.input_groups, sig.target_dim, TINY), sig,
                                     {}, history_length=4))
    with pytest.raises(ValueError, match="checkpoint is for robot PendulumWithContact, not Cartpole"):
        NeuralEnvironment.from_checkpoint(make_env("Cartpole", 1), paths)
    one, two = (tiny_neural_env("Cartpole", 2).integrator for _ in range(2))
    with pytest.raises(ValueError, match="must step the same environment"):
        NeRDEnsembleIntegrator([one, two])
    with pytest.raises(ValueError, match="two models or more"):
        NeRDEnsembleIntegrator([one])


def test_ensemble_disagreement_is_zero_for_equal_members_and_measures_their_spread():
    """The disagreement is the members' spread per target coordinate in units of the first model's target std,
    root-mean-squared: zero for identical predictions, and known for a known spread."""
    env = make_env("Cartpole", 2)
    model = tiny_model(env, 0)
    nenv = NeuralEnvironment(env, [model, model])
    nenv.reset(states=torch.zeros(2, 4))
    nenv.step(torch.zeros(2, 1))
    assert nenv.integrator.disagreement.shape == (2,) and nenv.integrator.disagreement.abs().max() < 1e-6
    one, two = nenv.integrator.members
    scale = torch.sqrt(model.target_norm.var + model.target_norm.eps).float()
    base = torch.zeros(2, 4)
    # Two members at base +- d: the spread (std over members) of each coordinate is |d|.
    d = torch.tensor([[1.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]]) * scale
    one.predict_targets, two.predict_targets = (lambda: base + d), (lambda: base - d)
    torch.testing.assert_close(nenv.integrator.predict_targets(), base)
    torch.testing.assert_close(nenv.integrator.disagreement, torch.tensor([0.5, 2.0]))


def test_rank_correlation_of_monotone_relations():
    """Spearman's correlation is +1 for any increasing relation and -1 for a decreasing one."""
    from nerd.evaluation import rank_correlation

    x = torch.tensor([0.1, 0.5, 0.2, 0.9])
    assert rank_correlation(x, x ** 3) == pytest.approx(1.0)
    assert rank_correlation(x, -x) == pytest.approx(-1.0)


def test_mirror_option_makes_any_model_equivariant_under_the_robots_reflection():
    """With ``mirror`` every model steps beside its mirror image, so a rollout from the mirrored start under mirrored
    torques is the mirror image of the rollout, for any weights (an untrained model with the joint-limit groups
    here, through a rail stop); the model alone is not equivariant (the test can fail)."""
    from nerd.envs.cartpole import Cartpole

    signs = torch.tensor(Cartpole.mirror_joint_signs)
    state_signs = torch.cat([signs, signs])
    start = torch.tensor([[3.9, 0.3, 2.0, -1.0], [0.4, 2.5, -3.0, 1.0]])
    torques = torch.tensor([[300.0, 0.0], [-800.0, 0.0]])

    def mirror_gap(mirror: bool) -> float:
        env = make_env("Cartpole", 4)
        model = tiny_model(env, 0, joint_limit_inputs=True, joint_limit_lookahead=True)
        nenv = NeuralEnvironment(env, [model], mirror=mirror)
        nenv.reset(states=torch.cat([start, start * state_signs]))
        gap = 0.0
        for _ in range(6):
            nenv.step_with_joint_act(torch.cat([torques, torques * signs]))
            states = nenv.get_states()
            assert torch.isfinite(states).all()
            gap = max(gap, float((states[2:] - states[:2] * state_signs).abs().max()))
        return gap

    assert mirror_gap(True) < 1e-5
    assert mirror_gap(False) > 1e-3


def test_mirror_option_doubles_each_model_and_is_refused_without_a_symmetry():
    """Two models with ``mirror`` step as four members (each plain, then mirrored); a robot that declares no
    reflection (the Ant) refuses the option in one line."""
    from nerd.integrator import NeRDEnsembleIntegrator

    env = make_env("Cartpole", 2)
    nenv = NeuralEnvironment(env, [tiny_model(env, 0), tiny_model(env, 1)], mirror=True)
    assert isinstance(nenv.integrator, NeRDEnsembleIntegrator)
    assert [member.mirror is not None for member in nenv.integrator.members] == [False, True, False, True]
    ant = make_env("Ant", 1)
    with pytest.raises(ValueError, match="Ant declares no reflection symmetry"):
        NeuralEnvironment(ant, tiny_model(ant, 0), mirror=True)
