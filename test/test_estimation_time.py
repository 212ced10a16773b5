"""Time done right: integer-nanosecond grids, torques held as the robot held them, every drop counted."""

import numpy as np
import pytest

from diffsim_ros.estimation.data import DataError, TorqueSignal, Trajectory
from diffsim_ros.io.bags import BagTopics, read_bag, write_bag
from diffsim_ros.estimation.preparation import DatasetOptions, prepare_dataset
from diffsim_ros.io.ros_messages import NS_PER_S, float64_multi_array_msg, joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages

EXACT = 0.0
MEAN_TOL = 1e-12  # [N·m] exact integrals of piecewise polynomials
T0_NS = 1_764_000_000 * NS_PER_S
PERIOD_NS = 10_000_000
JOINTS = ["j0", "j1"]
TOPICS = BagTopics(joint_states="/joint_states", commanded_torques="/command")
FACTORY = TypestoreMessages()


def _bag(path, state_ns, command_ns, command_values, positions=None, efforts=None):
    positions = np.zeros((len(state_ns), 2)) if positions is None else positions
    efforts = np.zeros((len(state_ns), 2)) if efforts is None else efforts
    messages = [(TOPICS.joint_states, joint_state_msg(FACTORY, int(ns), JOINTS, q, np.zeros(2), e), int(ns))
                for ns, q, e in zip(state_ns, positions, efforts)]
    messages += [(TOPICS.commanded_torques, float64_multi_array_msg(FACTORY, v), int(ns)) for ns, v in zip(command_ns, command_values)]
    messages.sort(key=lambda m: m[2])
    return write_bag(path, messages, storage="mcap")


def _motion(count):
    t = np.arange(count) * 0.01
    return np.stack([0.3 * np.sin(2.0 * t), 0.2 * np.cos(1.3 * t)], 1)


def test_a_command_acts_from_its_stamp_on(tmp_path):
    # States and commands share the stamps k * 10 ms exactly; the command steps at sample 57.
    # A float grid (np.arange over seconds) lands just before each stamp, and a zero-order
    # hold then takes the previous command for most samples: the 10 ms shift of the issue.
    count, step = 200, 57
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    values = np.where(np.arange(count)[:, None] >= step, [5.0, -2.0], [1.0, 3.0])
    path = _bag(tmp_path / "bag", stamps, stamps, values, positions=_motion(count))
    options = DatasetOptions(torque_source="commanded", torque_hold="zoh")
    dataset, summary = prepare_dataset(read_bag(path, JOINTS, topics=TOPICS).streams(), options=options)
    assert summary.torque_source == "commanded" and summary.trajectories == 1
    traj = dataset.trajectories[0]
    index = (traj.stamps_ns // PERIOD_NS).astype(int)
    np.testing.assert_array_equal(traj.torque.at(traj.stamps_ns), values[index])
    # Per-sample torques are filtered like the accelerations: a symmetric blend around the step.
    at_step = int(np.flatnonzero(index == step)[0])
    np.testing.assert_allclose(traj.tau[at_step - 20], [1.0, 3.0], atol=MEAN_TOL)
    np.testing.assert_allclose(traj.tau[at_step + 20], [5.0, -2.0], atol=MEAN_TOL)
    assert 1.0 < traj.tau[at_step, 0] < 5.0
    # Rollout steps of 2.5 ms: the step's interval applies the new command from its stamp on.
    windows = traj.windows(1, 1, steps_per_sample=4)
    first = int(np.flatnonzero(index == step)[0])
    np.testing.assert_allclose(windows["tau"][first - 1], np.repeat([[1.0, 3.0]], 4, 0), atol=MEAN_TOL, rtol=0)
    np.testing.assert_allclose(windows["tau"][first], np.repeat([[5.0, -2.0]], 4, 0), atol=MEAN_TOL, rtol=0)


def test_jittered_stamps_are_resampled_on_an_integer_grid(tmp_path):
    rng = np.random.default_rng(0)
    count = 300
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64) + rng.integers(-1_500_000, 1_500_000, count)
    stamps[0] = T0_NS
    command_ns = T0_NS + 4_000_000 + PERIOD_NS * np.arange(count, dtype=np.int64)  # another phase
    step_ns = command_ns[120]
    values = np.where(command_ns[:, None] >= step_ns, [5.0, -2.0], [1.0, 3.0])
    t = (stamps - T0_NS) * 1e-9
    positions = np.stack([0.3 * np.sin(2.0 * t), 0.2 * np.cos(1.3 * t)], 1)
    path = _bag(tmp_path / "bag", stamps, command_ns, values, positions=positions)
    bag = read_bag(path, JOINTS, topics=TOPICS)
    dataset, _ = prepare_dataset(bag.streams(), options=DatasetOptions(torque_source="commanded", torque_hold="zoh"))
    traj = dataset.trajectories[0]
    grid = traj.stamps_ns + bag.t0_ns
    assert np.all(np.diff(traj.stamps_ns) == traj.period_ns) and abs(traj.period_ns - PERIOD_NS) < 0.002 * PERIOD_NS
    expected = np.where(grid[:, None] >= step_ns, [5.0, -2.0], [1.0, 3.0])
    np.testing.assert_array_equal(traj.torque.at(traj.stamps_ns), expected)
    # The rollout step that contains the command's stamp averages both commands exactly.
    windows = traj.windows(1, 1, steps_per_sample=1)
    k = int(np.flatnonzero(grid <= step_ns)[-1])
    before = (step_ns - grid[k]) / traj.period_ns  # share of the step held by the old command
    np.testing.assert_allclose(windows["tau"][k, 0], before * np.array([1.0, 3.0]) + (1 - before) * np.array([5.0, -2.0]),
                               atol=MEAN_TOL, rtol=0)
    # Filtered positions on the grid follow the true motion.
    truth = np.stack([0.3 * np.sin(2.0 * traj.stamps_ns * 1e-9), 0.2 * np.cos(1.3 * traj.stamps_ns * 1e-9)], 1)
    assert np.abs(traj.q - truth).max() < 1e-4


def test_dropped_and_reordered_samples_are_counted(tmp_path):
    count = 200
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    positions = _motion(count)
    positions[[50, 51, 120]] = np.nan
    messages = [(TOPICS.joint_states, joint_state_msg(FACTORY, int(ns), JOINTS, q, np.zeros(2), np.ones(2)), int(ns))
                for ns, q in zip(stamps, positions)]
    messages[10], messages[11] = (messages[11][0], messages[11][1], messages[10][2]), (messages[10][0], messages[10][1], messages[11][2])
    path = write_bag(tmp_path / "bag", messages, storage="sqlite3")
    with pytest.raises(Exception, match="--order-policy sort"):
        read_bag(path, JOINTS, topics=TOPICS)
    bag = read_bag(path, JOINTS, topics=TOPICS, order_policy="sort")
    _, summary = prepare_dataset(bag.streams(), options=DatasetOptions(torque_source="effort"))
    notes = " | ".join(summary.notes)
    assert "3 of 200 samples with NaN/inf dropped" in notes
    assert "1 of 200 samples out of order (sorted)" in notes
    # The gap left by the NaN samples splits the motion; nothing is silently bridged.
    assert summary.trajectories == 2 or "unused" in notes


def test_torque_signal_holds_and_interpolates():
    stamps = np.array([0, 10, 20, 30], dtype=np.int64) * 1_000_000
    values = np.array([[0.0], [1.0], [4.0], [9.0]])
    zoh, linear = TorqueSignal(stamps, values, "zoh"), TorqueSignal(stamps, values, "linear")
    np.testing.assert_array_equal(zoh.at(np.array([0, 9_999_999, 10_000_000, 45_000_000])), [[0.0], [0.0], [1.0], [9.0]])
    assert np.isnan(linear.at(np.array([35_000_000]))).all()
    np.testing.assert_allclose(zoh.means(np.array([5_000_000]), np.array([15_000_000])), [[0.5]], atol=MEAN_TOL)
    np.testing.assert_allclose(linear.means(np.array([0]), np.array([20_000_000])), [[1.5]], atol=MEAN_TOL)
    with pytest.raises(DataError, match="strictly increasing"):
        TorqueSignal(stamps[::-1], values)
    with pytest.raises(DataError, match="hold"):
        TorqueSignal(stamps, values, "spline")
    with pytest.raises(DataError, match="does not cover"):
        Trajectory(0.01, np.zeros((5, 1)), np.zeros((5, 1)), np.zeros((5, 1)), start_ns=0,
                   torque=TorqueSignal(stamps + 5_000_000, values, "zoh"))


@pytest.mark.parametrize("hold", ["zoh", "linear", "cubic"])
def test_interval_means_are_the_means_of_consecutive_edges_bit_for_bit(hold):
    rng = np.random.default_rng(3)
    stamps = np.cumsum(rng.integers(5_000_000, 15_000_000, 40)).astype(np.int64)
    signal = TorqueSignal(stamps, rng.normal(size=(40, 3)), hold)
    # (windows, edges): increasing edges inside the signal, uneven spacing, some on stamps.
    edges = np.sort(rng.integers(stamps[0], stamps[-1] - 100, (6, 9)), axis=1)
    edges[:, 4] = stamps[10 + np.arange(6)]
    edges = np.sort(edges, axis=1) + np.arange(9)  # strictly increasing
    expected = signal.means(edges[:, :-1], edges[:, 1:])
    assert signal.interval_means(edges).shape == (6, 8, 3)
    np.testing.assert_array_equal(signal.interval_means(edges), expected)
    np.testing.assert_array_equal(signal.interval_means(edges[0]), expected[0])
    assert np.isfinite(expected).all()


@pytest.mark.parametrize("hold", ["zoh", "linear", "cubic"])
@pytest.mark.parametrize("period_ns", [PERIOD_NS, 9_999_874, 9_999_995])  # edges shared, shared, not (a rounding tie)
@pytest.mark.parametrize("chunk", [4096, 7])  # 7: the stamps cross chunk boundaries (bounded memory on long bags)
def test_kernel_filtered_torques_share_edges_and_equal_the_per_stamp_means_bit_for_bit(hold, period_ns, chunk, monkeypatch):
    from diffsim_ros.estimation import data
    from diffsim_ros.estimation.signals import acceleration_kernel

    monkeypatch.setattr(data, "FILTER_CHUNK", chunk)

    rng = np.random.default_rng(4)
    stamps = np.cumsum(rng.integers(900_000, 1_100_000, 600)).astype(np.int64)
    signal = TorqueSignal(stamps, rng.normal(size=(600, 3)), hold)
    edges, weights = acceleration_kernel(31, 3, period_ns * 1e-9)
    edges_ns = np.round(edges * 1e9).astype(np.int64)
    grid = stamps[0] + 200_000_000 + period_ns * np.arange(25)
    with np.errstate(invalid="ignore"):
        expected = np.einsum("tcn,c->tn", signal.interval_means(grid[:, None] + edges_ns[None, :]), weights)
        np.testing.assert_array_equal(signal.filtered(grid, edges_ns, weights), expected)
        np.testing.assert_array_equal(signal.filtered(grid[3:4], edges_ns, weights), expected[3:4])
        np.testing.assert_array_equal(signal.filtered(grid[[0, 2, 3]], edges_ns, weights), expected[[0, 2, 3]])  # not uniform
    assert np.isfinite(expected).all()


def test_rests_and_motion_at_a_joint_limit_are_not_used(tmp_path):
    """A limit's torque is in no message: rests and motion samples at a limit are left out."""
    count = 600
    t = np.arange(count) * 0.01
    q = np.stack([0.3 * np.sin(2.0 * t), np.zeros(count)], 1)
    q[:150, 1] = 0.5  # a rest (j0 moves: no rest) ...
    q[:150, 0] = 0.0
    q[300:450] = [0.0, 0.8]  # ... and a rest at j1's upper limit
    q[450:, 0] = 0.3 * np.sin(2.0 * t[450:])
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    path = _bag(tmp_path / "bag", stamps, stamps, np.ones((count, 2)), positions=q, efforts=np.ones((count, 2)))
    streams = read_bag(path, JOINTS, topics=TOPICS).streams()
    options = DatasetOptions(torque_source="commanded", torque_hold="zoh")
    free, free_summary = prepare_dataset(streams, options=options)
    limits = (np.array([-1.0, -1.0]), np.array([1.0, 0.8]))
    limited, summary = prepare_dataset(streams, options=options, limits=limits)
    assert len(free.static) == 2 and len(limited.static) == 1
    np.testing.assert_allclose(limited.static.q[0], [0.0, 0.5])
    lost = free_summary.trajectory_seconds - summary.trajectory_seconds
    assert lost >= 1.0  # the 1.5 s at the limit (less the filter edges it shares)
    assert any("of a joint limit unused" in note for note in summary.notes)


def test_motion_without_a_recent_command_is_not_used(tmp_path):
    """Commands that stop for longer than command_timeout: the robot left torque mode."""
    count = 400
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    sent = np.r_[0:150, 200:count]  # 0.5 s without commands
    path = _bag(tmp_path / "bag", stamps, stamps[sent], np.ones((len(sent), 2)), positions=_motion(count))
    streams = read_bag(path, JOINTS, topics=TOPICS).streams()
    dataset, summary = prepare_dataset(streams, options=DatasetOptions(torque_source="commanded", torque_hold="zoh"))
    assert summary.trajectories == 2  # split at the gap
    gap = (T0_NS + 150 * PERIOD_NS + 250_000_000, T0_NS + 200 * PERIOD_NS)  # stale after 0.25 s
    for traj in dataset.trajectories:
        assert not np.any((traj.stamps_ns + T0_NS >= gap[0]) & (traj.stamps_ns + T0_NS < gap[1]))
    assert any("no commanded torque within 0.25 s" in note for note in summary.notes)


def test_commands_the_robot_did_not_apply_are_not_used(tmp_path):
    """A drive at its limit, or a controller chattering faster than the recording: the recorded
    command is not what moved the arm, and the measured effort shows it (bench_estimation's
    seed 1: -56 N·m recorded while +50 was applied)."""
    count = 600
    t = np.arange(count) * 0.01
    applied = np.stack([2.0 * np.sin(3.0 * t), 1.5 * np.cos(2.0 * t)], 1)
    efforts = applied + 0.01 * np.random.default_rng(0).standard_normal(applied.shape)
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    bad = slice(300, 330)
    recorded = applied.copy()
    recorded[bad, 0] = -applied[bad, 0] - 3.0
    options = DatasetOptions(torque_source="commanded")
    clean_path = _bag(tmp_path / "clean", stamps, stamps, applied, positions=_motion(count), efforts=efforts)
    clean, clean_summary = prepare_dataset(read_bag(clean_path, JOINTS, topics=TOPICS).streams(), options=options)
    path = _bag(tmp_path / "bad", stamps, stamps, recorded, positions=_motion(count), efforts=efforts)
    dataset, summary = prepare_dataset(read_bag(path, JOINTS, topics=TOPICS).streams(), options=options)
    assert not any("did not apply" in note for note in clean_summary.notes), clean_summary.notes
    assert any("did not apply" in note for note in summary.notes), summary.notes
    used = np.concatenate([traj.stamps_ns for traj in dataset.trajectories]) // PERIOD_NS
    assert not np.any((used >= bad.start) & (used < bad.stop)), "a sample with a command the robot did not apply was used"
    assert clean_summary.trajectory_seconds - summary.trajectory_seconds < 1.0  # its window and the filter's reach


def _hold_note(summary):
    note = next(n for n in summary.notes if n.startswith("commanded torques read as"))
    return note.split("(")[1].split(")")[0], float(note.split(" by ")[1].split(" ")[0])


def test_the_hold_is_read_where_the_robot_applied_its_commands(tmp_path):
    """A 1 kHz controller's torque recorded at 100 Hz is read as samples of a smooth torque;
    a burst of chatter (commands of +-40 N·m the drive did not apply) must not decide it:
    the hold's misfit is the clean recording's."""
    count = 600
    t = np.arange(count) * 0.01
    applied = np.stack([8.0 * np.sin(9.0 * t), 6.0 * np.cos(7.0 * t)], 1)
    efforts = np.stack([8.0 * np.sin(9.0 * (t - 0.001)), 6.0 * np.cos(7.0 * (t - 0.001))], 1)  # 1 ms behind
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    chatter = applied.copy()
    chatter[300:330, 0] = np.where(np.arange(30) % 2, 40.0, -40.0)
    options = DatasetOptions(torque_source="commanded")
    readings = []
    for name, recorded in (("clean", applied), ("chatter", chatter)):
        path = _bag(tmp_path / name, stamps, stamps, recorded, positions=_motion(count), efforts=efforts)
        readings.append(_hold_note(prepare_dataset(read_bag(path, JOINTS, topics=TOPICS).streams(), options=options)[1]))
    (clean_hold, clean_misfit), (hold, misfit) = readings
    assert clean_hold == hold == "cubic"
    assert misfit == pytest.approx(clean_misfit, rel=0.1), (misfit, clean_misfit)


def test_a_window_shorter_than_the_filter_is_no_trajectory_not_an_error(tmp_path):
    """An online window of 23 samples, fewer than the derivative filter spans (31 at 100 Hz),
    with commanded torques: no trajectory and a note, not a crash (the demo's first updates)."""
    count = 23
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    # The first commands come 0.1 s in: the samples before them have no command (stale).
    path = _bag(tmp_path / "bag", stamps, stamps[10:], np.ones((count - 10, 2)), positions=_motion(count))
    streams = read_bag(path, JOINTS, topics=TOPICS).streams()
    options = DatasetOptions(torque_source="commanded", torque_hold="zoh")
    dataset, summary = prepare_dataset(streams, options=options)
    assert dataset.trajectories == () and summary.trajectories == 0
    assert any("no run of valid filtered samples" in note for note in summary.notes)


def test_a_time_window_keeps_the_command_in_effect_at_its_start(tmp_path):
    """``RobotStreams.between`` (``calibrate --start/--end``): the command held over the window's
    start is kept, so its first samples still have torques; samples outside are gone."""
    count = 300
    stamps = T0_NS + PERIOD_NS * np.arange(count, dtype=np.int64)
    commands = stamps[::10]  # every 0.1 s: the window starts 0.05 s after one
    values = np.arange(len(commands))[:, None] * np.array([[1.0, -1.0]])
    path = _bag(tmp_path / "bag", stamps, commands, values, positions=_motion(count))
    streams = read_bag(path, JOINTS, topics=TOPICS).streams()
    window = streams.between(0.75, 2.5)
    assert window.joint_states.times[0] == pytest.approx(0.75) and window.joint_states.times[-1] == pytest.approx(2.5)
    np.testing.assert_allclose(window.commanded_torques.times, np.arange(7, 26) / 10)
    dataset, _ = prepare_dataset(window, options=DatasetOptions(torque_source="commanded", torque_hold="zoh"))
    traj = dataset.trajectories[0]
    np.testing.assert_array_equal(traj.torque.at(np.array([750_000_000])), [[7.0, -7.0]])  # sent at 0.7 s (stamps from t0)
    assert "[0.75, 2.5] s" in window.source
    with pytest.raises(DataError, match=r"no joint state in \[5, 6\] s; the recording spans \[0, 2.99\] s"):
        streams.between(5.0, 6.0)
