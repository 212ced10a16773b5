"""The embedded runtime with small real nodes: delivery, QoS, deterministic order, time sources,
recording in both storages, bag replay, and a stale-data watchdog under injected faults.

All timing is simulated (``clock="sim"``) except one wall-clock smoke test that asserts no
durations.
"""

from dataclasses import dataclass

import numpy as np
import pytest

from diffsim_ros.io.bags import STORAGES, BagTopics, bag_info, read_bag
from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    float64_multi_array_msg,
    float64_multi_array_to_array,
    joint_state_msg,
    joint_state_to_sample,
    JointNameMap,
    seconds_to_ns,
    time_to_ns,
)
from diffsim_ros.io.ros_types import CLOCK, FLOAT64_MULTI_ARRAY, JOINT_STATE
from diffsim_ros.runtime import COMMAND_QOS, SENSOR_QOS, QosProfile, declare_config, param
from diffsim_ros.runtime.embedded import DEFAULT_START_NS, EmbeddedError, EmbeddedRuntime
from diffsim_ros.runtime.inputs import FRESH, STALE, joint_state_input

JOINTS = ["j0", "j1", "j2"]
PERIOD_S = 0.01
PERIOD_NS = seconds_to_ns(PERIOD_S)
EXACT = 0.0


# --- small real nodes -----------------------------------------------------------------------


@dataclass(frozen=True)
class ArmConfig:
    rate_hz: float = param(100.0, "joint state rate [Hz]")
    stop_at_s: float = param(1e9, "stop publishing after this node time [s since start]")
    resume_at_s: float = param(1e9, "resume publishing after this node time [s since start]")


class FakeArm:
    """Publishes joint states q_i = i * step (extra joint 'head_pan', reversed order)."""

    def __init__(self, handle):
        self.handle = handle
        self.config = declare_config(handle, ArmConfig)
        self.publisher = handle.create_publisher(JOINT_STATE, "/joint_states", SENSOR_QOS)
        self.timer = handle.create_timer(1.0 / self.config.rate_hz, self.tick)
        self.start_ns, self.count = handle.now_ns(), 0

    def tick(self):
        elapsed = (self.handle.now_ns() - self.start_ns) / NS_PER_S
        if self.config.stop_at_s <= elapsed < self.config.resume_at_s:
            return
        self.count += 1
        positions = self.count * np.array([0.01, 0.02, 0.03])
        names = ["head_pan"] + JOINTS[::-1]
        self.publisher.publish(joint_state_msg(self.handle.messages, self.handle.now_ns(), names, np.r_[0.0, positions[::-1]]))


@dataclass(frozen=True)
class ControllerConfig:
    rate_hz: float = param(100.0, "command rate [Hz]")
    timeout_s: float = param(0.05, "joint state timeout [s]")


class WatchdogController:
    """Publishes torque = -q at a fixed rate while joint states are fresh; stops when stale."""

    def __init__(self, handle):
        self.handle = handle
        self.config = declare_config(handle, ControllerConfig)
        self.input = joint_state_input(JOINTS, self.config.timeout_s, "/joint_states")
        self.publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/effort_controller/commands", COMMAND_QOS)
        handle.create_subscription(JOINT_STATE, "/joint_states", self.on_joint_state, SENSOR_QOS)
        handle.create_timer(1.0 / self.config.rate_hz, self.tick)
        self.commands = []

    def on_joint_state(self, msg):
        self.input.update(msg, self.handle.now_ns())

    def tick(self):
        now = self.handle.now_ns()
        change = self.input.watchdog.poll(now)
        if change == STALE:
            self.handle.get_logger().warning("joint states stale: torque commands stopped")
        elif change == FRESH:
            self.handle.get_logger().info("joint states fresh: commanding")
        if self.input.is_fresh(now):
            torque = -self.input.latest.positions
            self.publisher.publish(float64_multi_array_msg(self.handle.messages, torque))
            self.commands.append((now, torque))


class Recorder:
    """Subscribes to a topic and keeps (node time, message)."""

    def __init__(self, handle, topic="/joint_states", msg_type=JOINT_STATE, qos=SENSOR_QOS, trace=None):
        self.handle, self.trace, self.received = handle, trace, []
        handle.create_subscription(msg_type, topic, self.callback, qos)

    def callback(self, msg):
        self.received.append((self.handle.now_ns(), msg))
        if self.trace is not None:
            self.trace.append((self.handle.now_ns(), self.handle.name, "receive"))


class Burst:
    """Publishes ``count`` Float64MultiArray messages [k] at each tick."""

    def __init__(self, handle, count=5, qos=QosProfile(depth=10)):
        self.handle, self.count, self.sent = handle, count, 0
        self.publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/burst", qos)
        handle.create_timer(PERIOD_S, self.tick)

    def tick(self):
        for _ in range(self.count):
            self.sent += 1
            self.publisher.publish(float64_multi_array_msg(self.handle.messages, [self.sent]))


def values(recorder):
    return [float64_multi_array_to_array(msg)[0] for _, msg in recorder.received]


# --- delivery and QoS -----------------------------------------------------------------------


def test_publish_subscribe_maps_joints_by_name():
    with EmbeddedRuntime() as runtime:
        arm = runtime.add_node(FakeArm, "arm")
        listener = runtime.add_node(Recorder, "listener")
        runtime.spin_for(0.1)
        assert arm.count == 10 and len(listener.received) == 10
        times = [t for t, _ in listener.received]
        assert times == [DEFAULT_START_NS + k * PERIOD_NS for k in range(1, 11)]  # delivered at publish time
        first = joint_state_to_sample(listener.received[0][1], JointNameMap(JOINTS))
        np.testing.assert_allclose(first.positions, [0.01, 0.02, 0.03], atol=EXACT)
        assert first.stamp_ns == times[0]
        assert runtime.topics() == {"/joint_states": JOINT_STATE}


def test_messages_are_copied_through_cdr():
    with EmbeddedRuntime() as runtime:
        handle = runtime.create_node("talker")
        publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/burst")
        first = runtime.add_node(Recorder, "first", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile())
        second = runtime.add_node(Recorder, "second", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile())
        msg = float64_multi_array_msg(handle.messages, [1.0, 2.0])
        publisher.publish(msg)
        msg.data[:] = -1.0  # the publisher reuses its message before the subscribers run
        runtime.spin_for(0.0)
        assert values(first) == values(second) == [1.0]
        assert first.received[0][1] is not second.received[0][1] and first.received[0][1] is not msg


def test_qos_depth_keep_last_and_keep_all():
    with EmbeddedRuntime() as runtime:
        runtime.add_node(Burst, "burst")
        shallow = runtime.add_node(Recorder, "shallow", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile(depth=2))
        deep = runtime.add_node(Recorder, "deep", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile(depth=10))
        keep_all = runtime.add_node(
            Recorder, "all", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile(depth=1, history="keep_all")
        )
        runtime.spin_for(0.02)
        assert values(shallow) == [4.0, 5.0, 9.0, 10.0]  # each burst of 5: the last 2 survive
        assert values(deep) == values(keep_all) == [float(k) for k in range(1, 11)]
        shallow_sub = runtime._topics["/burst"].subscriptions[0]
        assert (shallow_sub.received, shallow_sub.taken, shallow_sub.dropped) == (10, 4, 6)


def test_incompatible_qos_is_not_connected_and_logged():
    with EmbeddedRuntime() as runtime:
        runtime.add_node(Burst, "burst", count=1, qos=QosProfile(reliability="best_effort"))
        reliable = runtime.add_node(Recorder, "reliable", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile())
        best_effort = runtime.add_node(
            Recorder, "best_effort", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile(reliability="best_effort")
        )
        runtime.spin_for(0.03)
        assert reliable.received == [] and len(best_effort.received) == 3
        (warning,) = [r for r in runtime.log_records if r.level == "warning"]
        assert warning.node == "reliable" and "requests reliable delivery, the publisher offers best effort" in warning.message


def test_transient_local_replays_last_depth_messages_to_late_subscribers():
    latched = QosProfile(depth=2, durability="transient_local")
    with EmbeddedRuntime() as runtime:
        runtime.add_node(Burst, "burst", count=3, qos=latched)
        runtime.spin_for(0.01)
        late = runtime.add_node(Recorder, "late", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=latched)
        volatile = runtime.add_node(Recorder, "volatile", topic="/burst", msg_type=FLOAT64_MULTI_ARRAY, qos=QosProfile())
        runtime.spin_until(runtime.now_ns())  # deliver what is pending now, no new ticks
        assert values(late) == [2.0, 3.0] and values(volatile) == []


def test_deterministic_order_of_timers_and_deliveries():
    def run():
        trace = []
        with EmbeddedRuntime() as runtime:
            for name in ("a", "b"):
                handle = runtime.create_node(name)
                publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/t")

                def tick(handle=handle, publisher=publisher):
                    trace.append((handle.now_ns(), handle.name, "tick"))
                    publisher.publish(float64_multi_array_msg(handle.messages, [0.0]))

                handle.create_timer(PERIOD_S, tick)
            slow = runtime.create_node("slow")
            slow.create_timer(3 * PERIOD_S, lambda: trace.append((slow.now_ns(), "slow", "tick")))
            runtime.add_node(Recorder, "sink", topic="/t", msg_type=FLOAT64_MULTI_ARRAY, trace=trace)
            runtime.spin_for(0.1)
        return trace

    trace = run()
    assert trace == run()
    t1 = DEFAULT_START_NS + PERIOD_NS
    # Equal times run in scheduling order: both timers, then the two deliveries.
    assert trace[:4] == [(t1, "a", "tick"), (t1, "b", "tick"), (t1, "sink", "receive"), (t1, "sink", "receive")]
    assert [t for t, _, _ in trace] == sorted(t for t, _, _ in trace)
    assert sum(1 for _, name, _ in trace if name == "slow") == 3
    assert sum(1 for _, name, _ in trace if name == "a") == 10


def test_names_types_and_misuse_errors():
    with EmbeddedRuntime() as runtime:
        handle = runtime.create_node("n", namespace="/robot")
        assert handle.resolve("joint_states") == "/robot/joint_states"
        assert handle.resolve("~/status") == "/robot/n/status"
        assert handle.resolve("/abs") == "/abs"
        publisher = handle.create_publisher(JOINT_STATE, "joint_states")
        with pytest.raises(EmbeddedError, match="topic /robot/joint_states has type sensor_msgs/msg/JointState"):
            handle.create_subscription(FLOAT64_MULTI_ARRAY, "/robot/joint_states", print)
        with pytest.raises(TypeError, match="takes sensor_msgs/msg/JointState, got std_msgs/msg/Float64MultiArray"):
            publisher.publish(float64_multi_array_msg(handle.messages, [1.0]))
        bad = joint_state_msg(handle.messages, 1, ["a"], [1.0])
        bad.position = [1.0]  # a list where the CDR serializer needs an array
        with pytest.raises(TypeError, match="invalid message on /robot/joint_states"):
            publisher.publish(bad)
        with pytest.raises(EmbeddedError, match="invalid topic name"):
            handle.create_publisher(JOINT_STATE, "bad topic")
        with pytest.raises(EmbeddedError, match="already exists"):
            runtime.create_node("n", namespace="robot")
        with pytest.raises(EmbeddedError, match="not in the typestore"):
            handle.create_publisher("my_msgs/msg/Custom", "/c")
    with pytest.raises(EmbeddedError, match="after shutdown"):
        publisher.publish(joint_state_msg(handle.messages, 1, ["a"], [1.0]))
    with pytest.raises(EmbeddedError, match="shut down"):
        runtime.spin_for(0.1)


# --- time -----------------------------------------------------------------------------------


def test_use_sim_time_follows_clock_topic():
    start = DEFAULT_START_NS
    with EmbeddedRuntime() as runtime:
        sim = runtime.create_node("sim", parameter_overrides={"use_sim_time": True})
        ticks = []
        sim.create_timer(0.05, lambda: ticks.append(sim.now_ns()))
        assert sim.now_ns() == 0 and sim.use_sim_time  # no /clock yet: time 0, timers idle
        runtime.spin_for(0.2)
        assert ticks == [] and sim.now_ns() == 0
        clock = runtime.create_node("clock")
        publisher = clock.create_publisher(CLOCK, "/clock")
        sim_t = [10 * NS_PER_S]

        def publish_clock():
            sim_t[0] += PERIOD_NS
            publisher.publish(runtime.messages.new(CLOCK, clock={"sec": sim_t[0] // NS_PER_S, "nanosec": sim_t[0] % NS_PER_S}))

        clock.create_timer(PERIOD_S, publish_clock)
        runtime.spin_for(0.3)
        assert sim.now_ns() == sim_t[0] == 10 * NS_PER_S + 30 * PERIOD_NS
        # Activated at the first clock (10.01 s): fires every 0.05 s of clock time after that.
        assert ticks == [10 * NS_PER_S + PERIOD_NS + k * 5 * PERIOD_NS for k in range(1, 6)]
        assert runtime.now_ns() == start + seconds_to_ns(0.5)  # the runtime's own time is unaffected


def test_runtime_clock_publisher_drives_sim_time_nodes():
    with EmbeddedRuntime(clock_period_s=0.001) as runtime:
        sim = runtime.create_node("sim", parameter_overrides={"use_sim_time": True})
        ticks = []
        sim.create_timer(PERIOD_S, lambda: ticks.append(sim.now_ns()))
        runtime.spin_for(0.1)
        assert sim.now_ns() == runtime.now_ns()
        assert len(ticks) == 9 and np.all(np.diff(ticks) == PERIOD_NS)  # activation at the first clock tick


def test_wall_clock_smoke():
    with EmbeddedRuntime(clock="wall") as runtime:
        arm = runtime.add_node(FakeArm, "arm")
        before = runtime.now_ns()
        runtime.spin_for(0.03)
        assert runtime.now_ns() >= before + seconds_to_ns(0.03) and arm.count >= 1


def test_spin_until_condition_and_request_shutdown():
    with EmbeddedRuntime() as runtime:
        arm = runtime.add_node(FakeArm, "arm")
        assert runtime.spin_until_condition(lambda: arm.count == 7, timeout_s=1.0)
        assert runtime.now_ns() == DEFAULT_START_NS + 7 * PERIOD_NS
        assert not runtime.spin_until_condition(lambda: arm.count > 1000, timeout_s=0.05)
        assert runtime.now_ns() == DEFAULT_START_NS + 12 * PERIOD_NS
        arm.handle.create_timer(0.5, runtime.request_shutdown)
        runtime.spin()
        assert arm.count == 61  # the shutdown timer was scheduled before the arm's tick at 0.62 s


# --- watchdog and faults --------------------------------------------------------------------


def test_watchdog_stops_commands_on_stale_joint_states_and_resumes():
    timeout = 0.05
    with EmbeddedRuntime() as runtime:
        runtime.add_node(FakeArm, "arm", parameter_overrides={"stop_at_s": 0.5, "resume_at_s": 0.8})
        controller = runtime.add_node(WatchdogController, "controller", parameter_overrides={"timeout_s": timeout})
        runtime.spin_for(1.0)
    times = np.array([t for t, _ in controller.commands]) - DEFAULT_START_NS
    last_sample = seconds_to_ns(0.49)  # the arm's last tick before it stops
    gap = times[(times > last_sample)]
    assert gap[0] - last_sample <= seconds_to_ns(timeout)  # kept commanding within the timeout
    silent = (times > last_sample + seconds_to_ns(timeout)) & (times < seconds_to_ns(0.8))
    assert not silent.any()  # nothing published while stale
    assert times[-1] == seconds_to_ns(1.0)  # resumed
    messages = [(r.level, r.message) for r in runtime.log_records]
    assert messages.count(("warning", "joint states stale: torque commands stopped")) == 1
    assert messages.count(("info", "joint states fresh: commanding")) == 2  # start, then resume


def test_nan_bursts_reordering_and_drops_never_reach_the_commands():
    def fault(msg, now_ns):
        k = int(round((now_ns - DEFAULT_START_NS) / PERIOD_NS))
        if 20 <= k < 25:
            msg.position[1:] = np.nan  # a NaN burst on the model joints
        if k % 10 == 7:
            return [(1.5 * PERIOD_S, msg)]  # arrives after the next message: out of order
        if k % 10 == 3:
            return []  # dropped
        return [(0.0, msg)]

    with EmbeddedRuntime() as runtime:
        runtime.add_node(FakeArm, "arm")
        controller = runtime.add_node(WatchdogController, "controller", parameter_overrides={"timeout_s": 0.05})
        runtime.inject_fault("/joint_states", fault)
        runtime.spin_for(1.0)
    counters = controller.input.counters
    # 10 dropped (k % 10 == 3), NaN at k = 20, 21, 22, 24, 10 late (k % 10 == 7).
    assert counters.received == 90 and counters.dropped_nonfinite == 4 and counters.dropped_out_of_order == 10
    assert counters.accepted == 76
    torques = np.array([torque for _, torque in controller.commands])
    assert np.isfinite(torques).all()
    # No command at 0.01 s (no sample yet: the controller ticks before the first delivery) nor at
    # 0.25 s (last good sample at 0.19 s: 0.06 s > timeout), every other tick commands.
    assert len(torques) == 98
    stale = [r for r in runtime.log_records if r.level == "warning"]
    assert len(stale) == 1 and stale[0].time_ns == DEFAULT_START_NS + 25 * PERIOD_NS


# --- recording and replay -------------------------------------------------------------------


@pytest.mark.parametrize("storage", STORAGES)
def test_record_every_topic_and_read_back(tmp_path, storage):
    path = tmp_path / f"run_{storage}"
    with EmbeddedRuntime() as runtime:
        arm = runtime.add_node(FakeArm, "arm")
        controller = runtime.add_node(WatchdogController, "controller")
        runtime.record(path, storage=storage)
        runtime.spin_for(0.5)
        assert not path.exists()  # appears at shutdown
    info = bag_info(path)
    assert info.storage == storage
    assert info.topics == {
        "/joint_states": (JOINT_STATE, arm.count),
        "/effort_controller/commands": (FLOAT64_MULTI_ARRAY, len(controller.commands)),
    }
    assert info.offered_qos["/joint_states"][0].reliability.name == "BEST_EFFORT"
    data = read_bag(path, JOINTS, topics=BagTopics("/joint_states", commanded_torques="/effort_controller/commands"))
    js = data.joint_states
    np.testing.assert_allclose(js.positions, np.outer(np.arange(1, 51), [0.01, 0.02, 0.03]), atol=EXACT)
    np.testing.assert_array_equal(js.stamps_ns, DEFAULT_START_NS + PERIOD_NS * np.arange(1, 51))
    np.testing.assert_allclose(data.commanded_torques.torques, [torque for _, torque in controller.commands], atol=EXACT)


def test_recording_discarded_when_run_fails(tmp_path):
    with pytest.raises(RuntimeError, match="node crashed"):
        with EmbeddedRuntime() as runtime:
            runtime.add_node(FakeArm, "arm")
            runtime.record(tmp_path / "bag")
            runtime.spin_for(0.05)
            raise RuntimeError("node crashed")
    assert list(tmp_path.iterdir()) == []


def test_shutdown_callbacks_run_and_their_messages_are_recorded(tmp_path):
    with EmbeddedRuntime() as runtime:
        handle = runtime.create_node("controller")
        publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/hold")
        handle.add_on_shutdown(lambda: publisher.publish(float64_multi_array_msg(handle.messages, [0.0, 0.0])))
        runtime.record(tmp_path / "bag", storage="mcap")
        runtime.spin_for(0.1)
    assert bag_info(tmp_path / "bag").topics == {"/hold": (FLOAT64_MULTI_ARRAY, 1)}


def test_a_ctrl_c_in_a_shutdown_callback_lets_the_others_run_and_discards_the_recording(tmp_path):
    """Ctrl-C during shutdown (or a save that an atomic writer refuses after one): every other node
    still gets its shutdown call (a hold command), the recording is discarded, and the interrupt goes on."""
    def interrupted():
        raise KeyboardInterrupt

    held = []
    with pytest.raises(KeyboardInterrupt):
        with EmbeddedRuntime() as runtime:
            runtime.create_node("estimator").add_on_shutdown(interrupted)
            runtime.create_node("controller").add_on_shutdown(lambda: held.append("hold"))
            runtime.record(tmp_path / "bag")
            runtime.spin_for(0.05)
    assert held == ["hold"] and list(tmp_path.iterdir()) == []


def test_bag_replay_drives_sim_time_nodes(tmp_path):
    path = tmp_path / "recorded"
    with EmbeddedRuntime() as runtime:
        runtime.add_node(FakeArm, "arm")
        runtime.record(path, storage="sqlite3")
        runtime.spin_for(0.2)
    with EmbeddedRuntime(start_ns=5 * NS_PER_S) as replay:
        listener = replay.add_node(Recorder, "listener", parameter_overrides={"use_sim_time": True})
        player = replay.play_bag(path, rate=2.0)
        replay.spin_for(0.2)
        assert player.done and player.published == 20
    assert [t for t, _ in listener.received] == [time_to_ns(msg.header.stamp) for _, msg in listener.received]
    assert listener.received[-1][0] == DEFAULT_START_NS + 20 * PERIOD_NS  # node time is the bag's time
    assert replay.now_ns() == 5 * NS_PER_S + seconds_to_ns(0.2)
