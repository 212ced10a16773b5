"""The nodes over real DDS (rclpy + Fast DDS from the package index, shared memory, loopback only).

    python -m benchmarks.bench_ros [--duration 600] [--latency-seconds 30] [--output baxter|ros2_control|both]
                                   [--quick] [--busy]

Measures, each node a separate process started as a user would (``--ros-args --params-file``):

1. **Event-driven latency** (controller ``control_trigger: joint_state``, ros2_control output,
   gravity compensation): a probe publishes joint states at 500 Hz and receives the commands.
   *Receipt -> publish* is timed inside the controller (``time.perf_counter`` from the
   subscription callback's start to the command's ``publish`` returning; reported on
   ``/diagnostics`` over its last 2000 cycles). *End to end* is the probe's clock from
   publishing a state to receiving the command computed from it (commands matched to states
   by order; the run reports whether any state or command was dropped).
2. **The graph over ``--duration`` seconds, once per output** (``--output``, default both):
   sim_robot (MuJoCo) + estimator + controller (impedance through rest poses, 200 Hz timer),
   sim_robot and the controller on the same output: Baxter JointCommand (the built
   ``baxter_core_msgs``) or a ros2_control effort command (std_msgs Float64MultiArray in the
   controller's joint order). The probe records every command: mean rate, largest gap, and
   the gaps that are the controller's own (:func:`own_gaps`); the controller and sim_robot
   report their own gaps on ``/diagnostics``.
3. **CPU and memory per node** during each run (psutil: CPU time / wall time, peak RSS).
4. **Soak** (issue 14: a 10-minute run of the sim graph): each graph run is also a soak. The
   probe records the estimator's estimates (payload, spring against sim_robot's hidden truth),
   its estimated torques (one per joint state) and each node's resident memory every second:
   no drift, no rate loss (per-minute rates), flat memory (RSS at the start, at 2 min, at the
   end and every minute).

The machine's load average is recorded with the figures: on a shared machine the numbers
are an upper bound of what an idle one gives. Writes the ``ros`` section of RESULTS.md
(``ros-busy`` with ``--busy``: a busy loop per core beside the graph; ``--quick``: none).
"""

import argparse
import contextlib
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import cpu_hogs, machine_line, markdown_table, percentile, write_section
from diffsim_ros.nodes.outputs import BAXTER, ROS2_CONTROL, baxter_topics, effort_controller_topic
from diffsim_ros.runtime.heap import GcPauses
from diffsim_ros.runtime.scheduling import leave_realtime, use_realtime_priority

_TEST = Path(__file__).resolve().parents[1] / "test"
if str(_TEST) not in sys.path:
    sys.path.insert(0, str(_TEST))

from ros_graph import PARAMS, NodeProcess, Probe, _interface_cache, dds_environment, next_domain_id  # noqa: E402

SIM_PARAMS = PARAMS / "baxter_sim.params.yaml"
JOINTS = ["left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1", "left_w2"]
HOME = np.array([0.0, -0.55, 0.0, 1.3, 0.0, 0.8, 0.0])  # [rad]
STATE_RATE = 500.0  # [Hz]
STATE_TIMEOUT = 0.05  # [s] safety.state_timeout of config/baxter_sim.params.yaml
TARGETS = {"receipt_p99_ms": 1.0, "end_to_end_p99_ms": 3.0, "command_rate_hz": 100.0, "command_gap_ms": 50.0}
PROBE_PRIORITY = 30  # SCHED_FIFO of the probe, below the nodes'
# The streaming estimator (issue 45) in the graph: the groups it estimates (no camera, no rests).
STREAMING = {"method": "streaming", "groups": ["payload", "spring", "damping", "friction"]}
SOAK_SETTLE = 60.0  # [s] estimates from then on are judged for drift
SOAK_FIRST_ESTIMATE = 60.0  # [s] from the nodes' start (issue 47, under load)
SOAK_TOLERANCE = {"payload.mass": 0.02, "left_s1.spring.stiffness": 0.01, "left_s1.spring.offset": 0.03}  # relative
WAYPOINTS = [0.0, -0.55, 0.0, 1.3, 0.0, 0.8, 0.0, 0.3, -0.3, -0.2, 1.0, 0.3, 1.0, 0.2,
             -0.3, -0.7, 0.3, 1.5, -0.3, 0.6, -0.2]  # [rad] 3 rest poses, looped
# The graph's command outputs (config/baxter_sim.params.yaml's side and controller name): the
# topic the controller publishes and sim_robot consumes.
COMMAND_TOPICS = {BAXTER: baxter_topics("left")[0], ROS2_CONTROL: effort_controller_topic("effort_controller")}
OUTPUT_CHOICES = (*COMMAND_TOPICS, "both")


def graph_outputs(choice):
    """The outputs a ``--output`` choice runs the graph with, in order."""
    return list(COMMAND_TOPICS) if choice == "both" else [choice]


class ResourceMonitor:
    """CPU share and peak resident memory of processes, sampled every second on a thread.

    The thread runs at the probe's scheduling: a normal-priority thread holding the GIL while
    the machine's other work preempts it would stall the real-time probe (priority inversion).
    """

    def __init__(self, processes):
        import psutil

        self.processes = {name: psutil.Process(p.pid) for name, p in processes.items()}
        self.cpu0 = {name: self._cpu(p) for name, p in self.processes.items()}
        self.rss = {name: 0 for name in self.processes}
        self.samples = {name: [] for name in self.processes}  # (seconds since start, RSS [MiB])
        self.start, self._running = time.monotonic(), True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        _probe_realtime()  # the new thread too (threads start at normal priority: SCHED_RESET_ON_FORK)

    @staticmethod
    def _cpu(process):
        times = process.cpu_times()
        return times.user + times.system

    def _sample(self):
        while self._running:
            for name, process in self.processes.items():
                try:
                    rss = process.memory_info().rss
                    self.rss[name] = max(self.rss[name], rss)
                    self.samples[name].append((time.monotonic() - self.start, rss / 2**20))
                except Exception:  # the process ended
                    pass
            time.sleep(1.0)

    def stop(self):
        """{name: (CPU [% of one core], peak RSS [MiB])}."""
        self._running = False
        wall = time.monotonic() - self.start
        out = {}
        for name, process in self.processes.items():
            try:
                cpu = (self._cpu(process) - self.cpu0[name]) / wall * 100.0
            except Exception:
                cpu = float("nan")
            out[name] = (cpu, self.rss[name] / 2**20)
        return out


def _state_msg(JointState, seq):
    msg = JointState()
    now = time.time_ns()
    msg.header.stamp.sec, msg.header.stamp.nanosec = now // 10**9, now % 10**9
    msg.name = JOINTS
    q = HOME + 1e-4 * np.sin(np.arange(7) + seq * 0.01)
    msg.position, msg.velocity, msg.effort = q.tolist(), [0.0] * 7, [0.0] * 7
    return msg


def _probe_realtime():
    """The probe must see what the nodes publish, not its own starvation on a busy machine: real
    time below the nodes (sim 40, controller 50), where permitted. Returns the scheduling used."""
    why_not = use_realtime_priority(PROBE_PRIORITY)
    return f"normal ({why_not})" if why_not else f"SCHED_FIFO {PROBE_PRIORITY}"


@contextlib.contextmanager
def _probe_heap():
    """No garbage collection in the probe's process while it records.

    The probe keeps every message it receives: over a 600 s run, millions of objects. Full
    collections over them took 0.2-0.6 s (measured with ``gc.callbacks``), during which the probe
    took nothing from DDS and its sensor-QoS queues (depth 5) overflowed: joint-state gaps of up to
    a second that were the probe's own, not the nodes'. Memory is ample for a run. Yields the
    :class:`GcPauses` of the window (no collection is expected).
    """
    gc.collect()
    gc.freeze()
    gc.disable()
    pauses = GcPauses()
    try:
        yield pauses
    finally:
        gc.enable()
        gc.unfreeze()
        pauses.close()


def latency_run(seconds, log_dir):
    """Event-driven controller fed 500 Hz joint states by the probe; returns the figures."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    domain = next_domain_id()
    env = dds_environment(domain)
    controller = NodeProcess("controller_node", env, SIM_PARAMS, {
        "output": "ros2_control", "mode": "gravity_compensation", "control_trigger": "joint_state",
        "follow_estimates": False, "safety.state_timeout": 0.05}, log_dir)
    probe = Probe(domain, "bench_probe")
    probe_scheduling = _probe_realtime()
    try:
        probe.subscribe(Float64MultiArray, COMMAND_TOPICS[ROS2_CONTROL])
        probe.subscribe(DiagnosticArray, "/diagnostics")
        publisher = probe.node.create_publisher(JointState, "/robot/joint_states", qos_profile_sensor_data)
        probe.wait_for(lambda: probe.messages(COMMAND_TOPICS[ROS2_CONTROL]), 120.0, "the controller")
        time.sleep(1.0)
        sent, period = [], 1.0 / STATE_RATE
        start = len(probe.messages(COMMAND_TOPICS[ROS2_CONTROL]))
        monitor = ResourceMonitor({"controller_node": controller.process})
        with _probe_heap() as probe_gc:
            deadline, next_due, seq = time.monotonic() + seconds, time.monotonic(), 0
            first_sent = time.monotonic()
            while time.monotonic() < deadline:
                publisher.publish(_state_msg(JointState, seq))
                sent.append(time.monotonic())
                seq += 1
                next_due += period
                time.sleep(max(0.0, next_due - time.monotonic()))
            time.sleep(1.5)  # the last commands and one more diagnostics message
        resources = monitor.stop()
        # Commands of the states sent (the timer's hold commands after the stream ends excluded).
        commands = [t for t, _ in probe.messages(COMMAND_TOPICS[ROS2_CONTROL])[start:]
                    if first_sent <= t <= sent[-1] + 0.04]
        diagnostics = probe.messages("/diagnostics")
    finally:
        leave_realtime(all_threads=True)
        probe.close()
        controller.stop()
    values = {kv.key: kv.value for _, msg in diagnostics[-1:] for s in msg.status for kv in s.values
              if s.name.endswith("control")}
    inputs = {kv.key: kv.value for _, msg in diagnostics[-1:] for s in msg.status for kv in s.values
              if s.name.endswith("joint_states")}
    accepted = int(inputs.get("accepted", -1))
    matched = len(commands) == len(sent) == accepted
    if matched:
        latency = (np.asarray(commands) - np.asarray(sent)) * 1e3
    else:  # drops: match each command to the newest state sent before it
        index = np.searchsorted(np.asarray(sent), np.asarray(commands)) - 1
        latency = (np.asarray(commands) - np.asarray(sent)[np.clip(index, 0, None)]) * 1e3
    return {
        "sent": len(sent), "accepted": accepted, "commands": len(commands), "matched_by_order": matched,
        "state_rate_hz": len(sent) / (sent[-1] - sent[0]),
        "end_to_end_ms": (percentile(latency, 50), percentile(latency, 99), float(np.max(latency))),
        "receipt_ms": tuple(float(values.get(f"receipt->publish {k} [ms]", "nan")) for k in ("p50", "p99", "max")),
        "resources": resources, "probe_scheduling": probe_scheduling, "scheduling": values.get("scheduling", "?"),
        "probe_collections": probe_gc.collections,
    }


def _command_class(output):
    if output == BAXTER:
        from baxter_core_msgs.msg import JointCommand

        return JointCommand
    from std_msgs.msg import Float64MultiArray

    return Float64MultiArray


def _command_kind(output, msg):
    """What a command says besides its torques: Baxter's mode, or how many values an effort command holds."""
    return f"mode {msg.mode}" if output == BAXTER else f"{len(msg.data)} values"


def own_gaps(commands, states, limit_ms=50.0, state_timeout=STATE_TIMEOUT):
    """The command gaps [ms] over ``limit_ms`` that are the controller's own (probe arrival times [s]).

    A gap is the controller's own when joint states kept arriving at the probe through it (none
    older than ``state_timeout`` at any instant): the probe was listening, and the controller had
    fresh states. On stale states Baxter's controller stops on purpose (the robot falls back to
    position mode); ros2_control's publishes the hold instead, so a gap with states missing at the
    probe too is the probe's or delivery's, unless sim_robot had one (its own diagnostics).
    """
    commands, states = np.asarray(commands, dtype=float), np.asarray(states, dtype=float)
    own = []
    for begin, gap in zip(commands[:-1], np.diff(commands) * 1e3):
        if gap <= limit_ms:
            continue
        inside = states[(states >= begin - state_timeout) & (states <= begin + gap / 1e3)]
        state_gaps = np.diff(np.concatenate([[begin - state_timeout], inside, [begin + gap / 1e3]]))
        if state_gaps.max() <= state_timeout:
            own.append(float(gap))
    return own


def graph_run(seconds, log_dir, baxter, output=BAXTER, estimator=None):
    """sim_robot + estimator + controller commanding through ``output``; command rate and gaps at the probe.

    ``estimator``: parameter overrides of the estimator node (e.g. :data:`STREAMING`), or None.

    Both ends use the output: the controller publishes on it (Baxter JointCommand, or a ros2_control
    effort command in its joint order) and sim_robot emulates the hardware behind it.
    """
    domain = next_domain_id()
    env = baxter.environment(dds_environment(domain))
    log_dir = Path(log_dir) / output
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()  # the nodes' start: the first estimate is timed from here
    processes = {
        "sim_robot_node": NodeProcess("sim_robot_node", env, SIM_PARAMS, {"output": output}, log_dir),
        "estimator_node": NodeProcess("estimator_node", env, SIM_PARAMS, {
            "calibration_output": str(log_dir / "calibration.yaml"), **(estimator or {})}, log_dir),
        "controller_node": NodeProcess("controller_node", env, SIM_PARAMS, {
            "output": output, "reference.waypoints": WAYPOINTS, "reference.loop": True}, log_dir),
    }
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    topic = COMMAND_TOPICS[output]
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    probe = Probe(domain, "bench_probe")
    probe_scheduling = _probe_realtime()
    try:
        probe.subscribe(_command_class(output), topic)
        probe.subscribe(JointState, "/robot/joint_states", qos_profile_sensor_data)
        probe.subscribe(JointState, "/estimator/estimated_torques", qos_profile_sensor_data)
        probe.subscribe(Float64MultiArray, "/estimator/estimates", latched)
        probe.subscribe(DiagnosticArray, "/diagnostics")
        probe.wait_for(lambda: len(probe.messages(topic)) > 200, 180.0, f"{output} commands")
        # The window opens after the probe's last collection (_probe_heap's, ~0.15 s holding the GIL: a gap
        # in everything the probe records, at the window's first command when it was opened before).
        with _probe_heap() as probe_gc:
            start = len(probe.messages(topic))
            monitor = ResourceMonitor({name: p.process for name, p in processes.items()})
            t0 = time.monotonic()
            time.sleep(seconds)
        resources = monitor.stop()
        received = probe.messages(topic)[start:]
        soak = soak_figures(probe, monitor, t0, seconds, topic)
        estimates = probe.messages("/estimator/estimates")
        soak["first_estimate_s"] = estimates[0][0] - started if estimates else float("nan")
        state_messages = list(probe.messages("/robot/joint_states"))  # one snapshot: messages keep arriving
        states = np.asarray([t for t, _ in state_messages])
        stamps = np.asarray([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for _, m in state_messages])
        stale_warnings = processes["controller_node"].output().count("joint states stale")
        rejections = rejection_reasons(processes["sim_robot_node"].output())
        control, hardware = ([{kv.key: kv.value for kv in st.values} for _, msg in probe.messages("/diagnostics")
                              for st in msg.status if st.name == name] for name in ("controller: control",
                                                                                   "sim_robot: hardware"))
    finally:
        leave_realtime(all_threads=True)
        probe.close()
        for process in processes.values():
            process.stop()
    times = np.asarray([t for t, _ in received])
    gaps = np.diff(times) * 1e3
    modes = {_command_kind(output, msg) for _, msg in received}
    own = own_gaps(times, states, 50.0, STATE_TIMEOUT)
    state_gaps_ms = np.diff(states[(states >= times[0]) & (states <= times[-1])]) * 1e3
    return {"output": output, "topic": topic,
            "commands": len(times), "seconds": times[-1] - times[0], "rate_hz": (len(times) - 1) / (times[-1] - times[0]),
            "max_gap_ms": float(gaps.max()), "gaps_over_50ms": int(np.sum(gaps > 50.0)),
            "own_gaps_over_50ms": len(own), "max_own_gap_ms": max(own, default=0.0),
            "state_gaps_over_timeout": int(np.sum(state_gaps_ms > STATE_TIMEOUT * 1e3)),
            "max_state_gap_ms": float(state_gaps_ms.max()), "stale_warnings": stale_warnings,
            # sim_robot stamps each state when it publishes: stamps missing at the probe were not
            # published or not delivered to it (the sim's own diagnostics tell which).
            "max_stamp_gap_ms": float(np.diff(np.sort(stamps[states >= times[0]])).max() * 1e3),
            "stamp_gaps_over_timeout": int(np.sum(np.diff(np.sort(stamps[states >= times[0]])) > STATE_TIMEOUT)),
            "controller_largest_gap_ms": float(control[-1]["largest command gap [ms]"]),
            "controller_gaps_over_50ms": int(control[-1]["command gaps > 50 ms"]),
            "controller_gc_pause_ms": float(control[-1]["largest GC pause [ms]"]),
            "controller_full_gcs": int(control[-1]["full GC collections"]),
            "controller_scheduling": control[-1]["scheduling"], "probe_scheduling": probe_scheduling,
            "probe_collections": probe_gc.collections,
            # Measured in sim_robot where it publishes (the whole run): its own silences.
            "sim_largest_gap_ms": float(hardware[-1]["largest joint state gap [ms]"]),
            "sim_gaps_over_50ms": int(hardware[-1]["joint state gaps > 50 ms"]),
            "sim_gc_pause_ms": float(hardware[-1]["largest GC pause [ms]"]),
            "sim_real_time_factor": min(float(h["real-time factor"]) for h in hardware[1:]),
            "sim_rejected_commands": int(hardware[-1]["rejected commands"]), "sim_rejections": rejections,
            "sim_scheduling": hardware[-1]["scheduling"],
            "gap_p99_ms": percentile(gaps, 99), "modes": sorted(modes), "resources": resources, "soak": soak}


def rejection_reasons(log):
    """The distinct reasons sim_robot's log gives for rejected commands (its throttled warnings), in order."""
    marker = "command rejected: "
    return list(dict.fromkeys(line.split(marker, 1)[1].strip() for line in log.splitlines() if marker in line))


def _truth():
    import yaml

    truth = yaml.safe_load(SIM_PARAMS.read_text())["sim_robot"]["ros__parameters"]["truth"]
    return {"payload.mass": truth["payload_mass"], "left_s1.spring.stiffness": truth["spring_stiffness"][0],
            "left_s1.spring.offset": truth["spring_offset"][0]}


def soak_figures(probe, monitor, t0, seconds, command_topic):
    """Estimates against the truth after SOAK_SETTLE, per-minute rates (commands on ``command_topic``), memory."""
    from diffsim_ros.nodes.messages import estimates_from_msg

    truth, estimates = _truth(), []
    for t, msg in probe.messages("/estimator/estimates"):
        values, _ = estimates_from_msg(msg)
        estimates.append((t - t0, {k: float(np.asarray(values[k]).reshape(-1)[0]) for k in truth if k in values}))
    settled = [(t, v) for t, v in estimates if t >= SOAK_SETTLE]
    worst = {k: max((abs(v[k] / truth[k] - 1.0) for _, v in settled if k in v), default=float("nan")) for k in truth}
    minutes = int(seconds // 60)
    rates = {}
    for topic in (command_topic, "/robot/joint_states", "/estimator/estimated_torques"):
        times = np.asarray([t - t0 for t, _ in probe.messages(topic)])
        rates[topic] = [np.sum((times >= 60 * m) & (times < 60 * (m + 1))) / 60.0 for m in range(minutes)]
    memory = {}
    for name, samples in monitor.samples.items():
        t, rss = np.asarray(samples, dtype=float).T if samples else (np.zeros(1), np.zeros(1))
        memory[name] = memory_figures(t, rss, minutes)
    return {"estimates": len(estimates), "settled": len(settled), "worst": worst, "rates": rates, "memory": memory,
            "last": estimates[-1][1] if estimates else {}}


def memory_figures(t, rss, minutes):
    """A node's resident memory [MiB] sampled at ``t`` [s]: ``{"start", "at_2min", "end", "growth"}`` (from minute 2
    to the end: start-up allocations excluded) and ``"per_minute"`` (the last sample of each minute)."""
    t, rss = np.asarray(t, dtype=float), np.asarray(rss, dtype=float)
    after = rss[t >= 120.0] if np.any(t >= 120.0) else rss
    per_minute = [float(rss[t < 60.0 * (m + 1)][-1]) for m in range(minutes) if np.any(t < 60.0 * (m + 1))]
    return {"start": float(rss[0]), "at_2min": float(after[0]), "end": float(rss[-1]),
            "growth": float(rss[-1] - after[0]), "per_minute": per_minute}


def _resources_rows(*runs):
    rows = []
    for label, run in runs:
        for name, (cpu, rss) in run["resources"].items():
            rows.append([label, name, f"{cpu:.0f} %", f"{rss:.0f} MiB"])
    return rows


def _ok(good):
    return "met" if good else "**not met**"


def commands_met(run):
    """Issue 47's command targets on a run: the rate at the probe, the gaps in the controller (its own)."""
    return run["rate_hz"] >= TARGETS["command_rate_hz"] and run["controller_largest_gap_ms"] <= TARGETS["command_gap_ms"]


def _command_rows(runs):
    return [[run["output"], f"`{run['topic']}`", run["commands"], f"{run['rate_hz']:.1f}",
             f"{run['controller_largest_gap_ms']:.1f} / {run['max_gap_ms']:.1f}",
             f"{run['controller_gaps_over_50ms']} / {run['gaps_over_50ms']}",
             f"{run['own_gaps_over_50ms']}" + (f" ({run['max_own_gap_ms']:.0f} ms)" if run["own_gaps_over_50ms"] else ""),
             f"{run['gap_p99_ms']:.1f}", ", ".join(run["modes"]), ">= 100 Hz, no gap > 50 ms",
             _ok(commands_met(run)) + " (judged on the controller's gaps)"] for run in runs]


def _self_rows(runs):
    """What the controller and sim_robot measured of themselves (their ``/diagnostics``), and the probe's states."""
    return [[run["output"], f"{run['controller_largest_gap_ms']:.1f}", run["controller_gaps_over_50ms"],
             f"{run['controller_gc_pause_ms']:.1f} ({run['controller_full_gcs']} full)", run["stale_warnings"],
             f"{run['sim_largest_gap_ms']:.1f}", run["sim_gaps_over_50ms"], f"{run['sim_real_time_factor']:.3f}",
             f"{run['sim_gc_pause_ms']:.1f}", run["sim_rejected_commands"],
             f"{run['state_gaps_over_timeout']} ({run['max_state_gap_ms']:.0f} ms)",
             f"{run['stamp_gaps_over_timeout']} ({run['max_stamp_gap_ms']:.0f} ms)"] for run in runs]


def report(latency, runs, load_before, load_after, duration):
    """The section: the latency run and one graph run per output (``runs``: graph_run's figures, in order)."""
    e2e, receipt = latency["end_to_end_ms"], latency["receipt_ms"]
    rows = [
        ["state receipt -> command publish, event-driven (in the controller)", f"{receipt[0]:.3f}", f"{receipt[1]:.3f}",
         f"{receipt[2]:.2f}", "p99 <= 1 ms", _ok(receipt[1] <= TARGETS["receipt_p99_ms"])],
        [f"end to end: state published -> command received (probe), {latency['state_rate_hz']:.0f} Hz states",
         f"{e2e[0]:.3f}", f"{e2e[1]:.3f}", f"{e2e[2]:.2f}", "p99 <= 3 ms", _ok(e2e[1] <= TARGETS["end_to_end_p99_ms"])],
    ]
    outputs = " and ".join(run["output"] for run in runs)
    body = [
        "## ROS 2 over real DDS (rclpy + Fast DDS from the package index, shared memory, loopback)",
        "",
        f"`python -m benchmarks.bench_ros` — {machine_line()}. Each node a separate process "
        "(`--ros-args --params-file config/baxter_sim.params.yaml`), an rclpy probe in the benchmark "
        "process; a warm install (stale kernel families compiled before the nodes start). "
        f"Load average (1 min) {load_before:.1f} before, {load_after:.1f} after: "
        + ("**measured under load** (the machine is shared); re-run on an idle machine for the "
           "figures the targets are about." if max(load_before, load_after) > 1.0 else "an idle machine."),
        "",
        "### Latency, event-driven controller (gravity compensation, ros2_control output) [ms]",
        "",
        markdown_table(["measure", "p50", "p99", "max", "target", ""], rows),
        "",
        f"Controller at {latency['scheduling']}, probe at {latency['probe_scheduling']} (no garbage collection while recording: {latency['probe_collections']} collections). "
        f"{latency['sent']} states sent, {latency['accepted']} accepted by the controller, {latency['commands']} "
        f"commands received; commands matched to states {'by order (nothing dropped)' if latency['matched_by_order'] else 'to the newest state before them (some dropped)'}.",
        "",
        f"### Commands over {duration:.0f} s per output: {outputs} (sim_robot + estimator + controller, impedance, "
        "200 Hz timer; one run of the graph each)",
        "",
        "sim_robot and the controller both on the output: Baxter JointCommand (the controller stops publishing on stale "
        "joint states), or a ros2_control effort command in the controller's joint order (it publishes the hold "
        "instead); the estimator explains the motion with the ros2_control commands, with Baxter's measured efforts.",
        "",
        markdown_table(["output", "topic", "commands at the probe", "rate [Hz]", "largest gap: controller / probe [ms]",
                        "gaps > 50 ms: controller / probe", "the controller's own at the probe",
                        "gap p99 at the probe [ms]", "modes / values", "target", ""], _command_rows(runs)),
        "",
    ]
    first = runs[0]
    body += [
        "Measured in the nodes themselves (their `/diagnostics`, the whole run including start-up): the controller's "
        "wall-clock gaps between consecutive torque commands (a deliberate stop restarts the count), its longest "
        "garbage collection (start-up heap frozen) and how often it logged stale joint states; sim_robot's gaps "
        "between the joint states it published (100 Hz), the lowest real-time factor of its physics over a second, "
        "its longest garbage collection and the commands it rejected. At the probe: joint-state arrival gaps longer "
        "than `safety.state_timeout` (50 ms) and gaps in their stamps (sim_robot stamps each state as it publishes): "
        "a gap at the probe that sim_robot did not have is delivery or the probe. A command gap at the probe is the "
        "controller's own when joint states kept arriving at the probe through it.",
        "",
        markdown_table(["output", "controller: largest gap [ms]", "gaps > 50 ms", "longest GC [ms]", "stale warnings",
                        "sim_robot: largest state gap [ms]", "gaps > 50 ms", "lowest real-time factor",
                        "longest GC [ms]", "rejected commands", "probe: state arrival gaps > 50 ms (longest)",
                        "state stamp gaps > 50 ms (longest)"], _self_rows(runs)),
        "",
        *[f"sim_robot on {run['output']} rejected commands because: " + "; ".join(run["sim_rejections"]) + "."
          for run in runs if run.get("sim_rejections")],
        f"Scheduling: controller {first['controller_scheduling']}, sim_robot {first['sim_scheduling']}, probe "
        f"{first['probe_scheduling']} (no garbage collection while recording: "
        f"{', '.join(str(run['probe_collections']) for run in runs)} collections).",
        "",
        "### CPU (share of one core) and peak memory per node",
        "",
        markdown_table(["run", "node", "CPU", "peak RSS"],
                       _resources_rows(("latency (500 Hz states)", latency),
                                       *((f"{run['output']}, {duration:.0f} s", run) for run in runs))),
        "",
    ] + soak_report(runs, duration)
    return "\n".join(body)


def soak_report(runs, duration):
    """The soak section (issue 14, item 7; issue 47 under load): the same graph runs, one per output."""
    truth = _truth()
    summary = [[run["output"], run["soak"]["estimates"], run["soak"]["settled"],
                f"{run['soak']['first_estimate_s']:.0f}", f"<= {SOAK_FIRST_ESTIMATE:.0f} s",
                _ok(run["soak"]["first_estimate_s"] <= SOAK_FIRST_ESTIMATE)] for run in runs]
    rows = [[name, run["output"], f"{truth[name]:g}", f"{run['soak']['last'].get(name, float('nan')):.4g}",
             f"{100 * run['soak']['worst'][name]:.2f} %", f"{100 * SOAK_TOLERANCE[name]:g} %",
             _ok(run["soak"]["worst"][name] <= SOAK_TOLERANCE[name])
             + ("" if run["soak"]["settled"] else f" (no estimate after {SOAK_SETTLE:.0f} s)")]
            for name in truth for run in runs]
    rate_rows = [[run["output"], topic, f"{min(r):.1f}", f"{max(r):.1f}", f"{r[0]:.1f} / {r[-1]:.1f}"]
                 for run in runs for topic, r in run["soak"]["rates"].items() if r]
    memory_rows = [[run["output"], name, f"{m['start']:.0f}", f"{m['at_2min']:.0f}", f"{m['end']:.0f}",
                    f"{m['growth']:+.1f}", " ".join(f"{x:.0f}" for x in m["per_minute"])]
                   for run in runs for name, m in run["soak"]["memory"].items()]
    return [
        f"### Soak: the same {duration:.0f} s runs of the sim graph (issue 14)",
        "",
        "The arm loops through three rest poses under impedance control the whole time (sim_robot's hidden truth: "
        f"config/baxter_sim.params.yaml); the first estimate is timed from the nodes' start.",
        "",
        markdown_table(["output", "accepted estimates", f"after {SOAK_SETTLE:.0f} s", "first after [s]",
                        "target (issue 47, under load)", ""], summary),
        "",
        markdown_table(["parameter", "output", "true", "last estimate", f"worst error after {SOAK_SETTLE:.0f} s",
                        "tolerance", ""], rows),
        "",
        markdown_table(["output", "topic (messages per second, per minute)", "lowest minute", "highest minute",
                        "first / last minute"], rate_rows),
        "",
        markdown_table(["output", "node", "RSS at the start [MiB]", "at 2 min [MiB]", "at the end [MiB]",
                        "growth from 2 min [MiB]", "RSS at the end of each minute [MiB]"], memory_rows),
    ]


def _warm_install():
    """Compile the stale kernel families first, as an install does (`python -m diffsim_ros.pipelines.kernels`):
    the figures are a warm install's, not a first start's (that one is test_kernel_warmup's)."""
    from diffsim_ros.pipelines.kernels import FAMILIES, compile_kernels
    from diffsim_ros.runtime.warmup import stale_families

    stale = stale_families(list(FAMILIES))
    if stale:
        print(f"compiling the stale kernel families {stale} before the run", flush=True)
        compile_kernels(stale)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="graph run per output [s] (default 600)")
    parser.add_argument("--latency-seconds", type=float, default=30.0, help="500 Hz latency run [s] (default 30)")
    parser.add_argument("--output", choices=OUTPUT_CHOICES, default="both",
                        help="the graph's command output: baxter, ros2_control or both, each its own run of --duration "
                             "(default both)")
    parser.add_argument("--quick", action="store_true", help="20 s graph runs, 10 s latency run; RESULTS.md untouched")
    parser.add_argument("--latency-only", action="store_true", help="only the latency run (RESULTS.md untouched)")
    parser.add_argument("--estimator-method", choices=("batch", "streaming"), default="batch",
                        help="the estimator node's method; streaming: payload, spring, damping, friction (section "
                             "ros-streaming, or ros-busy-streaming with --busy)")
    parser.add_argument("--busy", action="store_true",
                        help="a busy-loop process per core beside the graph, the whole time (section ros-busy)")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.latency_seconds = 20.0, 10.0
    outputs = graph_outputs(args.output)
    from diffsim_ros.runtime.interfaces import baxter_core_msgs

    baxter = baxter_core_msgs(_interface_cache(), log=print)
    baxter.load_in_process()
    _warm_install()
    load_before = os.getloadavg()[0]
    # The loops end by themselves past the run (each graph run's start-up within its 600 s of margin).
    hog_seconds = args.latency_seconds + (args.duration + 600.0) * len(outputs) if args.busy else 0
    with cpu_hogs(hog_seconds), tempfile.TemporaryDirectory() as log_dir:
        latency = latency_run(args.latency_seconds, log_dir)
        print("latency:", latency)
        if args.latency_only:
            return
        runs = []
        for output in outputs:
            runs.append(graph_run(args.duration, log_dir, baxter, output,
                                  STREAMING if args.estimator_method == "streaming" else None))
            print(f"{output}:", runs[-1], flush=True)
    load_after = os.getloadavg()[0]
    body = report(latency, runs, load_before, load_after, args.duration)
    if args.busy:
        body = body.replace("## ROS 2 over real DDS", "## Under load (one busy loop per core): ROS 2 over real DDS", 1)
    if args.estimator_method == "streaming":
        body = body.replace("ROS 2 over real DDS", f"the streaming estimator ({', '.join(STREAMING['groups'])}), ROS 2 "
                            "over real DDS", 1)
    print(body)
    if not args.quick:
        section = "ros-busy" if args.busy else "ros"
        write_section(section + ("-streaming" if args.estimator_method == "streaming" else ""), body)


if __name__ == "__main__":
    main()
