"""Dataset generation and the HDF5 round trip: shapes, attributes, values, and crash safety."""

import re

import h5py
import numpy as np
import pytest
import torch

from nerd.datasets.hdf5 import TRAJECTORY_FIELDS, DatasetError, load_trajectories, read_attrs
from nerd.datasets.windows import TrajectoryWindows, dataset_files, piece_starts
from nerd.envs import make_env
from nerd.errors import UserError
from nerd.generation import GenerationConfig, finite_trajectories, generate_dataset


@pytest.fixture(scope="module")
def pendulum_dataset(tmp_path_factory):
    """5 pendulum trajectories of 12 steps (3 envs: two batches), random torques and random planes."""
    path = tmp_path_factory.mktemp("data") / "pendulum.hdf5"
    cfg = GenerationConfig("PendulumWithContact", num_transitions=60, trajectory_length=12, num_envs=3, seed=7)
    summary = generate_dataset(cfg, path, progress=False)
    return path, summary


def test_log_uniform_torque_scale_shrinks_each_trajectorys_box(tmp_path):
    """--torque-scale log-uniform draws one factor in [0.01, 1] per trajectory: every torque of a trajectory stays
    inside its shrunk box, the factors differ between trajectories (about half below 0.1), the rule is recorded, and
    robots whose data goes through a controller refuse it."""
    from nerd.envs.franka import TORQUE_NOISE_SCALE

    cfg = GenerationConfig("Franka", 64 * 20, trajectory_length=20, num_envs=64, seed=5, torque_scale="log-uniform")
    path = generate_dataset(cfg, tmp_path / "f.hdf5", progress=False).path
    assert read_attrs(path)["torque_scale"] == "log-uniform"
    relative = np.abs(load_trajectories(path, fields=("joint_acts",))["joint_acts"]) / np.asarray(TORQUE_NOISE_SCALE)
    peak = relative.max(axis=(1, 2))  # ≈ each trajectory's factor: 140 uniform draws nearly fill the box
    assert peak.max() <= 1.0 and peak.min() >= 0.0099 * 0.8
    assert 0.25 < (peak < 0.1).mean() < 0.75 and (peak > 0.5).any()
    full = GenerationConfig("Franka", 64 * 20, trajectory_length=20, num_envs=64, seed=5)
    peak_full = (np.abs(load_trajectories(generate_dataset(full, tmp_path / "g.hdf5", progress=False).path,
                                          fields=("joint_acts",))["joint_acts"]) / np.asarray(TORQUE_NOISE_SCALE))
    assert peak_full.max(axis=(1, 2)).min() > 0.9
    with pytest.raises(UserError, match="goes through its controller"):
        generate_dataset(GenerationConfig("Anymal", 10, trajectory_length=5, num_envs=2, torque_scale="log-uniform"),
                         tmp_path / "a.hdf5", progress=False)
    with pytest.raises(UserError, match="--torque-scale must be one of full, log-uniform, saturating"):
        GenerationConfig("Franka", 10, torque_scale="half")
    with pytest.raises(UserError, match="--passive has none"):
        GenerationConfig("Franka", 10, passive=True, torque_scale="log-uniform")
    assert not (tmp_path / "a.hdf5").exists()


def test_initial_states_task_starts_trajectories_from_the_task_reset(tmp_path):
    """--initial-states task starts every trajectory from the robot's task reset (Cartpole: every coordinate in
    [-1, 1] but the pole angle), the release's "data" from its data sampler (cart within ±3.5 m, rates ±10); the
    rule is recorded; an unknown one, and "limits" for a robot without near-limit starts, are refused before
    anything is written."""
    from nerd.envs.cartpole import RESET_RANGE

    starts = {}
    for rule in ("task", "data"):
        cfg = GenerationConfig("Cartpole", 256 * 3, trajectory_length=3, num_envs=256, seed=3, initial_states=rule)
        path = generate_dataset(cfg, tmp_path / f"{rule}.hdf5", progress=False).path
        assert read_attrs(path)["initial_states"] == rule
        starts[rule] = np.abs(load_trajectories(path, fields=("states",))["states"][:, 0])
    assert (starts["task"] <= np.asarray(RESET_RANGE) + 1e-6).all()
    assert starts["task"][:, [0, 2, 3]].max() > 0.9  # the reset box is filled
    assert starts["data"][:, 0].max() > 2.0 and starts["data"][:, 2:].max() > 5.0
    with pytest.raises(UserError, match="--initial-states must be one of data, limits, task, got 'env'"):
        GenerationConfig("Cartpole", 10, initial_states="env")
    with pytest.raises(UserError, match="PendulumWithContact has no near-limit initial states"):
        generate_dataset(GenerationConfig("PendulumWithContact", 8, trajectory_length=2, num_envs=4,
                                          initial_states="limits"), tmp_path / "limits.hdf5", progress=False)
    assert not (tmp_path / "limits.hdf5").exists()


def _franka_torques(tmp_path, name: str, **options) -> np.ndarray:
    """Joint torques (64 trajectories, 20 frames, 7) of a Franka dataset made with the generation ``options``,
    relative to the release's white-noise box."""
    from nerd.envs.franka import TORQUE_NOISE_SCALE

    cfg = GenerationConfig("Franka", 64 * 20, trajectory_length=20, num_envs=64, seed=5, **options)
    path = generate_dataset(cfg, tmp_path / f"{name}.hdf5", progress=False).path
    for key, value in options.items():
        assert read_attrs(path)["generator_settings"][key] == value
    return load_trajectories(path, fields=("joint_acts",))["joint_acts"] / np.asarray(TORQUE_NOISE_SCALE)


def test_saturating_torque_scale_puts_half_the_torques_at_the_limit(tmp_path):
    """--torque-scale saturating doubles the white noise and clips it to the box: every torque stays inside the
    box, half of them sit on its faces (|2u| > 1 for u uniform in [-1, 1]), and the mean |torque| is 0.75 of it.
    The release's white noise has none on the faces and a mean of 0.5."""
    relative = np.abs(_franka_torques(tmp_path, "sat", torque_scale="saturating"))
    assert relative.max() <= 1.0 + 1e-6
    assert 0.46 < np.isclose(relative, 1.0).mean() < 0.54
    assert 0.72 < relative.mean() < 0.78
    white = np.abs(_franka_torques(tmp_path, "white"))
    assert np.isclose(white, 1.0).mean() < 0.01 and 0.47 < white.mean() < 0.53


def test_torque_hold_frames_holds_each_torque_for_a_random_time(tmp_path):
    """--torque-hold-frames 16: a joint keeps its torque until a redraw, with probability 1/L per frame and L
    log-uniform in [1, 16] per trajectory, so the share of redrawn torques is E[1/L] = (1 - 1/16) / ln 16 = 0.34
    on average and differs between trajectories; the release's white noise redraws every torque every frame. The
    option refuses nonsense, passive data and robots whose data goes through a controller."""
    held = _franka_torques(tmp_path, "held", torque_hold_frames=16)
    redrawn = (held[:, 1:] != held[:, :-1]).mean(axis=(1, 2))  # per trajectory
    assert 0.25 < redrawn.mean() < 0.45
    assert redrawn.min() < 0.2 and redrawn.max() > 0.6
    white = _franka_torques(tmp_path, "white")
    assert (white[:, 1:] != white[:, :-1]).all()
    with pytest.raises(UserError, match="--torque-hold-frames must be at least 1, got 0"):
        GenerationConfig("Franka", 10, torque_hold_frames=0)
    with pytest.raises(UserError, match="--passive has none"):
        GenerationConfig("Franka", 10, passive=True, torque_hold_frames=4)
    with pytest.raises(UserError, match="--torque-hold-frames 4: Anymal's data goes through its controller"):
        generate_dataset(GenerationConfig("Anymal", 10, trajectory_length=5, num_envs=2, torque_hold_frames=4),
                         tmp_path / "a.hdf5", progress=False)
    assert not (tmp_path / "a.hdf5").exists()


def test_through_controller_passes_held_random_actions_through_the_franka_pd_law(tmp_path):
    """--through-controller with the Franka's joint-position PD: each torque is Kp·0.03125·a − Kd·q̇ (clipped) for
    an action a in [−1, 1] read from the state it acted on, so the torques carry the controller's damping; held
    actions (--torque-hold-frames) are held, not the torques, which follow q̇. The option refuses passive data and
    robots whose data already goes through their controller."""
    from nerd.envs.franka import PD_ACTION_SCALE, PD_KD, PD_KP, TORQUE_LIMITS

    cfg = GenerationConfig("Franka", 32 * 20, trajectory_length=20, num_envs=32, seed=5, control_mode="position",
                           through_controller=True, torque_hold_frames=8)
    path = generate_dataset(cfg, tmp_path / "pd.hdf5", progress=False).path
    assert read_attrs(path)["generator_settings"]["through_controller"] is True
    data = load_trajectories(path, fields=("joint_acts", "states"))
    torques, qd = data["joint_acts"].astype(np.float64), data["states"][..., 7:].astype(np.float64)
    unclipped = np.abs(torques) < np.asarray(TORQUE_LIMITS) - 1e-3
    actions = (torques + np.asarray(PD_KD) * qd) / (np.asarray(PD_KP) * PD_ACTION_SCALE)
    assert unclipped.mean() > 0.99 and np.abs(actions[unclipped]).max() <= 1.0 + 1e-3
    assert np.abs(actions).mean() > 0.4  # uniform in [-1, 1]: 0.5
    # the damping term: the torque falls with the joint rate (white noise does not correlate with it)
    assert np.corrcoef(torques[..., 0].ravel(), qd[..., 0].ravel())[0, 1] < -0.1
    same_action = np.isclose(actions[:, 1:], actions[:, :-1], atol=1e-3)
    assert 0.3 < same_action.mean() < 0.9 and np.isclose(torques[:, 1:], torques[:, :-1]).mean() <= 0.5
    with pytest.raises(UserError, match="--passive has none"):
        GenerationConfig("Franka", 10, passive=True, through_controller=True)
    with pytest.raises(UserError, match="--through-controller: Anymal's data goes through its controller"):
        generate_dataset(GenerationConfig("Anymal", 10, trajectory_length=5, num_envs=2, through_controller=True),
                         tmp_path / "a.hdf5", progress=False)
    assert not (tmp_path / "a.hdf5").exists()


def test_file_layout_and_attributes(pendulum_dataset):
    """Fields are trajectory-major (num_traj, T, ...) with the documented widths and attributes."""
    path, summary = pendulum_dataset
    attrs = read_attrs(path)
    assert summary.num_trajectories == attrs["num_trajectories"] == 5
    assert attrs["num_transitions"] == 60 and attrs["contact_count"] == 4 and attrs["seed"] == 7
    assert attrs["env_name"] == "PendulumWithContact" and attrs["newton_version"] == "1.8.0"
    assert attrs["generator_settings"]["num_envs"] == 3
    assert attrs["random_ground_planes"] and attrs["ground_plane_rule"] == "release"  # the release's rule by default
    data = load_trajectories(path)
    expected = {
        "states": (5, 12, 4), "next_states": (5, 12, 4), "joint_acts": (5, 12, 2),
        "contact_normals": (5, 12, 4, 3), "contact_points_0": (5, 12, 4, 3), "contact_points_1": (5, 12, 4, 3),
        "contact_depths": (5, 12, 4), "contact_thicknesses": (5, 12, 4), "gravity_dir": (5, 12, 3),
        "root_body_q": (5, 12, 7),
    }
    assert {k: v.shape for k, v in data.items()} == expected
    assert all(v.dtype == np.float32 for v in data.values())


def test_values_are_consistent(pendulum_dataset):
    """next_states[t] == states[t+1]; depths are signed distances along the normal; torques bounded."""
    data = load_trajectories(pendulum_dataset[0])
    np.testing.assert_array_equal(data["next_states"][:, :-1], data["states"][:, 1:])
    gap = data["contact_points_0"] - data["contact_points_1"]
    np.testing.assert_allclose((gap * data["contact_normals"]).sum(-1), data["contact_depths"], atol=1e-4)
    assert np.abs(data["joint_acts"]).max() <= 1500.0 and np.abs(data["joint_acts"]).max() > 100.0
    # Random planes: every trajectory starts with all candidates above its own plane.
    assert (data["contact_depths"][:, 0] - data["contact_thicknesses"][:, 0] >= 0).all()


def test_stored_trajectory_replays_in_the_simulator(pendulum_dataset):
    """Re-simulating a stored trajectory from its first state, torques and plane reproduces its states."""
    data = load_trajectories(pendulum_dataset[0], start=4, stop=5)
    env = make_env("PendulumWithContact", 1)
    normal = torch.from_numpy(data["contact_normals"][0, 0, 0])
    env.set_ground_planes(normal[None], torch.from_numpy(data["contact_points_1"][0, 0, :1]))
    env.set_states(torch.from_numpy(data["states"][0, :1]))
    for t in range(12):
        env.step_with_joint_act(torch.from_numpy(data["joint_acts"][0, t : t + 1]))
    np.testing.assert_allclose(env.get_states()[0].numpy(), data["next_states"][0, -1], atol=1e-4)


def test_contact_free_robot_stores_empty_contact_fields(tmp_path):
    """Cartpole (no contacts) stores zero-width contact fields and gravity (0, 0, -1)."""
    path = tmp_path / "cp.hdf5"
    generate_dataset(GenerationConfig("Cartpole", 20, trajectory_length=10, num_envs=2), path, progress=False)
    data = load_trajectories(path)
    assert data["contact_normals"].shape == (2, 10, 0, 3)
    np.testing.assert_array_equal(data["gravity_dir"][..., 2], -1.0)


def test_interrupted_generation_leaves_no_file(tmp_path, monkeypatch):
    """An exception mid-run removes the partial file and never publishes the final name."""
    import nerd.generation as generation

    calls = {"n": 0}
    original = generation.record_frame_inputs

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(generation, "record_frame_inputs", failing)
    path = tmp_path / "x.hdf5"
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(GenerationConfig("Cartpole", 100, trajectory_length=10, num_envs=2), path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_non_finite_and_diverged_trajectories_are_flagged():
    """Trajectories with NaN, inf or |x| > 1e5 are dropped; the others kept."""
    states = np.zeros((4, 3, 2), dtype=np.float32)
    states[1, 2, 0] = np.nan
    states[2, 0, 1] = 2e5
    nxt = states.copy()
    nxt[3, 1, 1] = -np.inf
    assert finite_trajectories({"states": states, "next_states": nxt}).tolist() == [True, False, False, False]


def test_reader_rejects_bad_files(tmp_path):
    """Missing, non-HDF5, incomplete and foreign files give a DatasetError saying what is wrong."""
    with pytest.raises(DatasetError, match="not found"):
        read_attrs(tmp_path / "missing.hdf5")
    (tmp_path / "garbage.hdf5").write_text("not hdf5")
    with pytest.raises(DatasetError, match="not a readable HDF5"):
        read_attrs(tmp_path / "garbage.hdf5")
    with h5py.File(tmp_path / "incomplete.hdf5", "w") as f:
        f.attrs["complete"] = False
    with pytest.raises(DatasetError, match="incomplete"):
        read_attrs(tmp_path / "incomplete.hdf5")
    with h5py.File(tmp_path / "foreign.hdf5", "w") as f:
        f.attrs["complete"] = True
        f.create_group("data")
    with pytest.raises(DatasetError, match=TRAJECTORY_FIELDS[0]):
        read_attrs(tmp_path / "foreign.hdf5")


def test_a_dataset_list_may_name_directories(tmp_path):
    """A list entry that is a directory stands for its ``*.hdf5`` files, sorted (as a directory alone does), so a
    transfer loop's ``refine.base_train`` may name a folder of parts beside single files."""
    (tmp_path / "parts").mkdir()
    for name in ("b.hdf5", "a.hdf5", "notes.txt", "c.hdf5.partial"):
        (tmp_path / "parts" / name).touch()
    single = tmp_path / "single.hdf5"
    assert dataset_files([single, tmp_path / "parts"]) == [single, tmp_path / "parts/a.hdf5",
                                                            tmp_path / "parts/b.hdf5"]
    assert dataset_files(str(tmp_path / "parts")) == [tmp_path / "parts/a.hdf5", tmp_path / "parts/b.hdf5"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="holds no .hdf5"):
        dataset_files([single, tmp_path / "empty"])
    with pytest.raises(DatasetError, match="list is empty"):
        dataset_files([])


def test_same_seed_same_data(tmp_path):
    """Generation is reproducible: the same seed writes identical states and torques."""
    cfg = GenerationConfig("Cartpole", 40, trajectory_length=10, num_envs=4, seed=11)
    a = load_trajectories(generate_dataset(cfg, tmp_path / "a.hdf5", progress=False).path)
    b = load_trajectories(generate_dataset(cfg, tmp_path / "b.hdf5", progress=False).path)
    np.testing.assert_array_equal(a["states"], b["states"])
    np.testing.assert_array_equal(a["joint_acts"], b["joint_acts"])


def test_longer_trajectories_are_cut_into_pieces_that_keep_every_window(tmp_path):
    """A part with longer trajectories than the first part trains beside it: its windows are exactly the windows
    of the long trajectories (some repeated where the last piece overlaps), and a shorter second part is refused."""
    short = generate_dataset(GenerationConfig("Cartpole", 40, trajectory_length=10, num_envs=4, seed=1),
                             tmp_path / "a_short.hdf5", progress=False).path
    long = generate_dataset(GenerationConfig("Cartpole", 46, trajectory_length=23, num_envs=2, seed=2),
                            tmp_path / "b_long.hdf5", progress=False).path
    assert piece_starts(23, 10, 4) == [0, 7, 13]  # stride 7; the last piece ends with the trajectory
    history = 4
    mixed = TrajectoryWindows(tmp_path, history)
    alone_short, alone_long = TrajectoryWindows(short, history), TrajectoryWindows(long, history)
    assert mixed.trajectory_length == 10 and mixed.num_trajectories == 4 + 2 * 3
    assert len(mixed) == len(alone_short) + 2 * 3 * 7

    def window_set(data, ids):
        inputs, targets = data.get_batch(ids)
        return {tuple(torch.cat([inputs["states"][i].flatten(), targets[i].flatten()]).tolist())
                for i in range(len(ids))}

    long_windows = window_set(alone_long, torch.arange(len(alone_long)))
    assert len(long_windows) == 2 * 20
    assert window_set(mixed, torch.arange(len(alone_short), len(mixed))) == long_windows
    assert window_set(mixed, torch.arange(len(alone_short))) == window_set(alone_short, torch.arange(len(alone_short)))
    with pytest.raises(DatasetError, match="list the part with the shortest trajectories first"):
        TrajectoryWindows([long, short], history)


def test_dataset_weights_follow_each_listed_entry_and_average_one(tmp_path):
    """Weights are given per list entry (a directory's files share its weight), kept per trajectory through the
    cutting of long trajectories, scaled to a mean of 1 over the windows, and handed out with each batch."""
    small = generate_dataset(GenerationConfig("Cartpole", 40, trajectory_length=10, num_envs=4, seed=1),
                             tmp_path / "small.hdf5", progress=False).path
    (tmp_path / "parts").mkdir()
    for seed in (2, 3):  # 2 trajectories of 23 steps each, 3 pieces per trajectory
        generate_dataset(GenerationConfig("Cartpole", 46, trajectory_length=23, num_envs=2, seed=seed),
                         tmp_path / "parts" / f"p{seed}.hdf5", progress=False)
    plain = TrajectoryWindows([small, tmp_path / "parts"], history=4)
    assert plain.weights is None and plain.batch_weights(torch.arange(3)) is None
    weighted = TrajectoryWindows([small, tmp_path / "parts"], history=4, weights=[1.0, 10.0])
    raw = torch.tensor([1.0] * 4 + [10.0] * (2 * 2 * 3))
    torch.testing.assert_close(weighted.weights, raw / raw.mean())
    per_window = weighted.batch_weights(torch.arange(len(weighted)))
    assert per_window.mean().item() == pytest.approx(1.0)
    assert per_window[-1] / per_window[0] == pytest.approx(10.0)  # the parts' windows against the small file's
    batch = next(weighted.iterate(8, torch.Generator().manual_seed(0)))
    assert len(batch) == 3 and batch[2].shape == (8,)
    with pytest.raises(DatasetError, match="2 dataset weights for 1 dataset entries"):
        TrajectoryWindows(small, history=4, weights=[1.0, 2.0])
    with pytest.raises(DatasetError, match="positive and finite"):
        TrajectoryWindows([small], history=4, weights=[0.0])


def test_summary_and_plot_name_coordinates_with_units(pendulum_dataset, tmp_path):
    """The file stores coordinate names; the summary table and the PNG (states, then torques) use them."""
    from nerd.datasets.summary import coordinate_names, format_summary, plot_dataset, summarize_dataset

    path, _ = pendulum_dataset
    attrs = read_attrs(path)
    assert attrs["state_names"] == ["joint_0 q [rad]", "joint_1 q [rad]", "joint_0 qd [rad/s]", "joint_1 qd [rad/s]"]
    assert attrs["joint_act_names"] == ["joint_0 [N·m]", "joint_1 [N·m]"]
    assert "joint_1 qd [rad/s]" in format_summary(summarize_dataset(path))
    # An older file without stored names gets them from the robot; an unknown robot gets indices.
    legacy = {k: v for k, v in attrs.items() if k not in ("state_names", "joint_act_names")}
    assert coordinate_names(legacy) == (attrs["state_names"], attrs["joint_act_names"])
    assert coordinate_names({**legacy, "env_name": "Robot"})[1] == ["joint_act[0]", "joint_act[1]"]
    png = plot_dataset(path, tmp_path / "plot.png")
    assert png.stat().st_size > 10_000


def test_controller_robot_records_actions_and_pd_torques_and_drops_a_diverged_env(tmp_path, monkeypatch):
    """Anymal data goes through its PD law with per-env random gains: the file holds the actions and the torques
    the law produced (consistent with Kp, Kd in [30, 200] x [0, 1]); an env whose state diverges is dropped with
    its trajectory while the others finish."""
    from nerd.envs.anymal import Anymal, default_joint_q

    sample = Anymal.sample_initial_states

    def with_one_broken_env(self, n, generator):
        states = sample(self, n, generator)
        # A state far beyond the divergence threshold (NaN states are refused on writing, by design).
        states[0, 20] = 1e30
        return states

    monkeypatch.setattr(Anymal, "sample_initial_states", with_one_broken_env)
    cfg = GenerationConfig("Anymal", 12, trajectory_length=4, num_envs=3, seed=3)
    summary = generate_dataset(cfg, tmp_path / "anymal.hdf5", progress=False)
    assert (summary.num_trajectories, summary.num_dropped) == (3, 2)  # two batches of 3, one env lost in each
    data = load_trajectories(summary.path, fields=("states", "actions", "joint_acts"))
    assert data["actions"].shape == (3, 4, 12) and np.abs(data["actions"]).max() <= 1.0
    q, qd = torch.as_tensor(data["states"][..., 7:19]), torch.as_tensor(data["states"][..., 25:37])
    error = torch.as_tensor(data["actions"]) * 0.5 + default_joint_q() - q
    # τ = Kp e − Kd q̇ for one (Kp, Kd) per env and frame: solve the two unknowns from the 12 joints.
    lhs = torch.stack([error, -qd], dim=-1).reshape(-1, 12, 2).double()
    gains = torch.linalg.lstsq(lhs, torch.as_tensor(data["joint_acts"]).reshape(-1, 12, 1).double()).solution
    fit = (lhs @ gains).reshape(data["joint_acts"].shape)
    np.testing.assert_allclose(fit.numpy(), data["joint_acts"], atol=1e-3)
    kp, kd = gains[:, 0, 0], gains[:, 1, 0]
    assert ((kp > 30 - 1e-3) & (kp < 200 + 1e-3)).all() and ((kd > -1e-3) & (kd < 1 + 1e-3)).all()
    assert kp.std() > 10  # redrawn, not one value


def test_progress_bar_counts_the_transitions_written(tmp_path, monkeypatch, capsys):
    """The generation bar ends at the transitions written: a batch's trajectories beyond the target and the
    dropped (diverged) ones are not counted, so it never passes its total."""
    from nerd.envs.cartpole import Cartpole

    sample = Cartpole.sample_initial_states

    def with_one_broken_env(self, n, generator):
        states = sample(self, n, generator)
        states[0, 0] = 1e30  # beyond the divergence threshold: this env's trajectory is dropped
        return states

    monkeypatch.setattr(Cartpole, "sample_initial_states", with_one_broken_env)
    # 10 trajectories wanted; batches of 4 keep 3 each, so the fourth batch has 3 finite and 1 is needed.
    summary = generate_dataset(GenerationConfig("Cartpole", 50, trajectory_length=5, num_envs=4, seed=0),
                               tmp_path / "c.hdf5", progress=True)
    assert (summary.num_transitions, summary.num_dropped) == (50, 4)
    counts = [int(n) for n in re.findall(r"(\d+)/50 ", capsys.readouterr().err)]
    assert counts[-1] == 50 and max(counts) == 50


def test_model_values_generate_other_physics_and_are_recorded(tmp_path):
    """Joint damping given as model values slows the same passive trajectories (same seed: same initial states), is
    recorded in the generator settings, and the robot signature stays the robot's; an unknown array is refused."""
    common = dict(env_name="PendulumWithContact", num_transitions=40, trajectory_length=20, num_envs=2, passive=True,
                  contact_config=0)
    plain = generate_dataset(GenerationConfig(**common), tmp_path / "plain.hdf5", progress=False).path
    damped = generate_dataset(GenerationConfig(**common, model_values={"joint_damping": [20.0, 10.0]}),
                              tmp_path / "damped.hdf5", progress=False).path
    a, b = (load_trajectories(p, ("states", "next_states")) for p in (plain, damped))
    np.testing.assert_array_equal(a["states"][:, 0], b["states"][:, 0])
    speed = [np.abs(d["next_states"][:, -1, 2:]).mean() for d in (a, b)]
    assert speed[1] < 0.9 * speed[0]
    attrs = read_attrs(damped)
    assert attrs["generator_settings"]["model_values"] == {"joint_damping": [20.0, 10.0]}
    assert attrs["env_name"] == read_attrs(plain)["env_name"]
    with pytest.raises(UserError, match="'no_such_array' is not a model array"):
        generate_dataset(GenerationConfig(**common, model_values={"no_such_array": [1.0, 1.0]}),
                         tmp_path / "x.hdf5", progress=False)
    assert not (tmp_path / "x.hdf5").exists()
