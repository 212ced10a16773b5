"""The pieces of the ROS graph benchmark (benchmarks/bench_ros.py, issues 14 and 47) on their own: which
command gaps are the controller's, the outputs a run covers and their topics, the memory figures, and a
report with one row per output. The graph runs themselves take minutes (the benchmark)."""

import sys

import numpy as np
import yaml

from oracles import REPO

sys.path.insert(0, str(REPO))  # benchmarks/ holds the figures shared with the test

from benchmarks import bench_ros  # noqa: E402
from benchmarks.bench_ros import COMMAND_TOPICS, SIM_PARAMS, graph_outputs, memory_figures, own_gaps, report  # noqa: E402

COMMAND_PERIOD = 0.005  # [s] the controller's 200 Hz
STATE_PERIOD = 0.01  # [s] sim_robot's 100 Hz


def _stream(period, seconds, silent=()):
    """Arrival times [s] every ``period`` over ``seconds``, none inside the ``silent`` (begin, end) spans."""
    t = np.arange(0.0, seconds, period)
    for begin, end in silent:
        t = t[(t <= begin) | (t >= end)]
    return t


def test_a_command_gap_while_states_kept_arriving_is_the_controllers_own():
    commands = _stream(COMMAND_PERIOD, 2.0, silent=[(0.5, 0.6)])  # 100 ms without a command
    own = own_gaps(commands, _stream(STATE_PERIOD, 2.0))
    assert len(own) == 1 and abs(own[0] - 100.0) < 1e-6, own


def test_a_command_gap_with_the_states_missing_at_the_probe_too_is_not_the_controllers():
    # The probe heard nothing for 200 ms (its own stall, delivery, or stale states: Baxter stops on them).
    commands = _stream(COMMAND_PERIOD, 2.0, silent=[(0.5, 0.7)])
    assert own_gaps(commands, _stream(STATE_PERIOD, 2.0, silent=[(0.48, 0.7)])) == []
    # States missing only well before the gap: the gap is the controller's again.
    assert len(own_gaps(commands, _stream(STATE_PERIOD, 2.0, silent=[(0.2, 0.35)]))) == 1


def test_gaps_up_to_the_limit_are_not_counted():
    commands = _stream(COMMAND_PERIOD, 2.0, silent=[(0.5, 0.54)])  # 40 ms
    assert own_gaps(commands, _stream(STATE_PERIOD, 2.0), limit_ms=50.0) == []


def test_both_outputs_run_by_default_on_the_topics_of_the_graphs_config():
    assert graph_outputs("both") == ["baxter", "ros2_control"]
    assert graph_outputs("ros2_control") == ["ros2_control"]
    params = yaml.safe_load(SIM_PARAMS.read_text())
    controller = params["/**/controller"]["ros__parameters"]
    assert COMMAND_TOPICS["baxter"] == f"/robot/limb/{controller['side']}/joint_command"
    # The estimator explains the motion with the ros2_control commands: the topic the controller publishes.
    assert COMMAND_TOPICS["ros2_control"] == params["estimator"]["ros__parameters"]["commanded_torques_topic"]


def test_memory_figures_give_the_start_minute_two_and_the_end():
    t = np.arange(0.0, 300.0, 1.0)
    rss = 500.0 + 0.1 * t  # [MiB] +6 MiB a minute
    m = memory_figures(t, rss, 5)
    assert (m["start"], m["at_2min"], m["end"]) == (500.0, 512.0, rss[-1])
    assert abs(m["growth"] - (rss[-1] - 512.0)) < 1e-9
    assert m["per_minute"] == [rss[59], rss[119], rss[179], rss[239], rss[299]]


def _run(output, rate_hz, controller_gap_ms, first_estimate_s, payload_error):
    memory = {"start": 500.0, "at_2min": 510.0, "end": 520.0, "growth": 10.0, "per_minute": [505.0, 510.0]}
    return {"output": output, "topic": COMMAND_TOPICS[output], "commands": 1000, "rate_hz": rate_hz,
            "controller_largest_gap_ms": controller_gap_ms, "max_gap_ms": 300.0, "controller_gaps_over_50ms": 0,
            "gaps_over_50ms": 1, "own_gaps_over_50ms": 0, "max_own_gap_ms": 0.0, "gap_p99_ms": 6.0,
            "modes": ["mode 3"] if output == "baxter" else ["7 values"], "controller_scheduling": "SCHED_FIFO 50",
            "controller_gc_pause_ms": 1.0, "controller_full_gcs": 0, "stale_warnings": 0, "sim_largest_gap_ms": 12.0,
            "sim_gaps_over_50ms": 0, "sim_real_time_factor": 0.99, "sim_gc_pause_ms": 1.0, "sim_rejected_commands": 0,
            "sim_scheduling": "SCHED_FIFO 40", "probe_scheduling": "SCHED_FIFO 30", "probe_collections": 0,
            "state_gaps_over_timeout": 1, "max_state_gap_ms": 300.0, "stamp_gaps_over_timeout": 0,
            "max_stamp_gap_ms": 12.0, "resources": {"controller_node": (20.0, 300.0)},
            "soak": {"estimates": 10, "settled": 5, "first_estimate_s": first_estimate_s,
                     "worst": {"payload.mass": payload_error, "left_s1.spring.stiffness": 0.001,
                               "left_s1.spring.offset": 0.001},
                     "last": {"payload.mass": 1.3}, "rates": {COMMAND_TOPICS[output]: [200.0, 199.0]},
                     "memory": {"estimator_node": memory}}}


def _row(body, *cells):
    """The one table row of ``body`` starting with ``cells``."""
    start = "| " + " | ".join(cells) + " |"
    rows = [line for line in body.splitlines() if line.startswith(start)]
    assert len(rows) == 1, (start, rows)
    return rows[0]


def test_the_report_has_a_row_per_output_judged_on_its_own_figures():
    latency = {"end_to_end_ms": (0.5, 1.0, 2.0), "receipt_ms": (0.1, 0.2, 0.5), "state_rate_hz": 500.0,
               "scheduling": "SCHED_FIFO 50", "probe_scheduling": "SCHED_FIFO 30", "probe_collections": 0,
               "sent": 5000, "accepted": 5000, "commands": 5000, "matched_by_order": True,
               "resources": {"controller_node": (10.0, 200.0)}}
    runs = [_run("baxter", 199.5, 30.0, 16.0, 0.001), _run("ros2_control", 90.0, 30.0, 75.0, 0.05)]
    body = report(latency, runs, 2.0, 3.0, 300.0)
    assert _row(body, "baxter", "`/robot/limb/left/joint_command`").endswith("| met (judged on the controller's gaps) |")
    assert "**not met**" in _row(body, "ros2_control", "`/effort_controller/commands`")  # 90 Hz
    assert _row(body, "baxter", "10", "5", "16").endswith("| met |")  # the first estimate after 16 s
    assert _row(body, "ros2_control", "10", "5", "75").endswith("| **not met** |")  # after 75 s
    assert _row(body, "payload.mass", "baxter").endswith("| met |")
    assert _row(body, "payload.mass", "ros2_control").endswith("| **not met** |")  # 5 % off
    assert _row(body, "ros2_control", "estimator_node", "500", "510", "520", "+10.0")  # RSS at the start too
    assert "ros2_control, 300 s" in body and "baxter, 300 s" in body  # CPU and peak memory per run


def test_a_run_is_met_only_on_both_command_targets():
    assert bench_ros.commands_met(_run("ros2_control", 199.0, 49.0, 10.0, 0.0))
    assert not bench_ros.commands_met(_run("ros2_control", 199.0, 51.0, 10.0, 0.0))
    assert not bench_ros.commands_met(_run("ros2_control", 99.0, 10.0, 10.0, 0.0))


def test_the_streaming_overrides_make_an_estimator_the_node_can_build():
    # The graph's estimator with bench_ros's --estimator-method streaming overrides: the streaming
    # estimator accepts them (no camera, no rests), so the run measures it rather than a refusal.
    from diffsim_ros.estimation.online import OnlineEstimatorConfig
    from diffsim_ros.estimation.online_estimators import make_online_estimator
    from diffsim_ros.estimation.streaming import StreamingEstimator
    from diffsim_ros.model import load_robot_config
    from oracles import BAXTER_LEFT

    params = yaml.safe_load(SIM_PARAMS.read_text())["estimator"]["ros__parameters"]
    assert "camera" in params["groups"] and "camera" not in bench_ros.STREAMING["groups"]
    config = OnlineEstimatorConfig(method=bench_ros.STREAMING["method"], groups=tuple(bench_ros.STREAMING["groups"]))
    estimator = make_online_estimator(load_robot_config(BAXTER_LEFT).build_model(), config)
    assert isinstance(estimator, StreamingEstimator)


def test_rejection_reasons_are_read_from_sim_robots_warnings_once_each():
    log = "\n".join([
        "[WARN] [1.0] [sim_robot]: command rejected: the hardware is still starting (kernels warming up)",
        "[INFO] [1.5] [sim_robot]: kernels ready",
        "[WARN] [2.0] [sim_robot]: command rejected: non-finite torques",
        "[WARN] [3.0] [sim_robot]: command rejected: the hardware is still starting (kernels warming up)",
    ])
    assert bench_ros.rejection_reasons(log) == ["the hardware is still starting (kernels warming up)", "non-finite torques"]
    assert bench_ros.rejection_reasons("[INFO] nothing rejected") == []
