"""object_estimator_node: object friction, mass and restitution estimated online from camera poses.

Object poses (one geometry_msgs/msg/PoseStamped topic per object of a scene file, the
format of ``diffsim-ros estimate-objects``) stream into an
:class:`~diffsim_ros.estimation.online_objects.OnlineObjectEstimator`: the offline contact
estimation engine (the LCP/cone contact world, :func:`~diffsim_ros.estimation.object_fit.
fit_objects`) run on every completed event (a slide that came to rest, a collision that
settled). Poses are expressed in the base frame with the calibration's ``camera.pose``.
Fits judged poor or implausible are rejected and reported; accepted events are combined
and published with their standard deviations.

Topics:

* subscribes one topic per scene object (the scene's ``topic``, or ``pose_topics``)
  (geometry_msgs/msg/PoseStamped, SENSOR_QOS); NaN, out-of-order, implausible and
  unknown-frame poses are dropped and counted;
* serves ``~/save_objects`` (std_srvs/srv/Trigger): write ``objects.yaml`` now and answer
  with its path (or why not);
* serves ``~/reset`` (std_srvs/srv/Trigger): forget the poses and estimates;
* publishes ``/diagnostics`` (diagnostic_msgs/msg/DiagnosticArray) every second: per-topic
  rates and drops, the estimator's events and the last verdict;
* publishes ``~/estimates`` (std_msgs/msg/Float64MultiArray, LATCHED_QOS) after every
  accepted event: the combined estimates and standard deviations in the layout of
  :mod:`diffsim_ros.nodes.messages` (element names ``box/ground.friction``, ``box.mass``...).

Fits (15-25 s per slide, minutes per collision, measured under load on 2 shared cores:
benchmarks/RESULTS.md, online-objects) run off the executor (``NodeHandle.run_in_background``);
poses that arrive meanwhile are queued and handed to the estimator when the fit is done.
Tuning parameters are the members of
:class:`~diffsim_ros.estimation.online_objects.OnlineObjectEstimatorConfig`.
"""

import collections
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from diffsim_ros.estimation.online_objects import EventOutcome, OnlineObjectEstimator, OnlineObjectEstimatorConfig
from diffsim_ros.io.calibration import check_output_path, load_calibration
from diffsim_ros.io.object_poses import camera_to_base, check_camera_pose
from diffsim_ros.io.ros_messages import NS_PER_S, MessageConversionError, pose_stamped_to_sample
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, POSE_STAMPED
from diffsim_ros.io.scene import load_scene
from diffsim_ros.nodes.messages import estimates_msg
from diffsim_ros.nodes.robot import set_threads
from diffsim_ros.nodes.services import trigger_services
from diffsim_ros.outputs import atomic_file
from diffsim_ros.resources import resolve_resource
from diffsim_ros.runtime import LATCHED_QOS, SENSOR_QOS, declare_config, param
from diffsim_ros.runtime.diagnostics import DIAGNOSTIC_ARRAY, OK, WARN, InputRates, diagnostic_array_msg, \
    input_status, node_label, status
from diffsim_ros.runtime.inputs import InputMonitor, PoseWorkspace
from diffsim_ros.runtime.params import check_ranges, group, refuse_run_time_changes
from diffsim_ros.runtime.rclpy_backend import exit_process, run_node

__all__ = ["ObjectEstimatorNode", "ObjectEstimatorNodeConfig", "default_objects_path", "main"]

_DIAGNOSTICS_PERIOD = 1.0  # [s]


def default_objects_path():
    """``$ROS_HOME/diffsim_ros/objects.yaml`` (ROS_HOME defaults to ~/.ros)."""
    ros_home = os.environ.get("ROS_HOME") or os.path.join(os.path.expanduser("~"), ".ros")
    return Path(ros_home) / "diffsim_ros" / "objects.yaml"


@dataclass(frozen=True)
class ObjectEstimatorNodeConfig:
    """Parameters of object_estimator_node (tuning: see OnlineObjectEstimatorConfig)."""

    scene_file: str = param("", "scene YAML (estimate-objects' format): objects, sizes, topics, known values, unknowns")
    calibration_file: str = param("", "calibration.yaml with camera.pose ('': the poses are in the base frame)")
    pose_topics: list[str] = param([], "PoseStamped topic of each scene object, in scene order ([]: the scene's topics)")
    pose_frame: str = param("", "header frame_id of the poses ('': the first pose's frame, then only that one)")
    objects_output: str = param("", "where to save objects.yaml ('' for $ROS_HOME/diffsim_ros/objects.yaml)")
    save_on_shutdown: bool = param(True, "save objects.yaml when the node shuts down (if anything was accepted)")
    input_timeout: float = param(1.0, "poses older than this are reported stale [s]")
    update_check_period: float = param(0.25, "how often the node looks for a completed event [s]")
    estimation: OnlineObjectEstimatorConfig = group(OnlineObjectEstimatorConfig, "")
    threads: int = param(1, "torch threads")

    def validate(self):
        if not self.scene_file:
            raise ValueError("scene_file is required (the objects, their topics and what is unknown)")
        check_ranges(self, positive=("input_timeout", "update_check_period", "threads"))


class ObjectEstimatorNode:
    """Online object estimator node (module docstring).

    Attributes:
        scene: The ObjectScene.
        estimator: OnlineObjectEstimator.
        inputs: Object name -> InputMonitor of its pose topic.
        published: Estimates messages published.
        saved: Paths written.
        busy: Whether a fit is running (off the executor).
        time_origin_ns: Stamp of the first pose [ns]; the estimator's times (and event times
            in logs and objects.yaml) are seconds since it.
        last_outcome: EventOutcome of the last event handled (None before).
    """

    def __init__(self, handle):
        self.handle = handle
        self.config = cfg = declare_config(handle, ObjectEstimatorNodeConfig)
        refuse_run_time_changes(handle, cfg)
        set_threads(cfg.threads)
        self.scene = load_scene(resolve_resource(cfg.scene_file))
        self.camera_pose = self._camera_pose(cfg.calibration_file)
        topics = dict(self.scene.topics)
        if cfg.pose_topics:
            if len(cfg.pose_topics) != len(topics):
                raise ValueError(f"pose_topics: one topic per scene object {list(topics)}, got {list(cfg.pose_topics)}")
            topics = dict(zip(topics, cfg.pose_topics))
        self.topics = topics
        self.estimator = self._new_estimator()
        # Poses arriving during a fit (a collision fit can take minutes): at most a window's worth
        # per object, the rest would fall out of the estimator's window anyway.
        self._pending = collections.deque(maxlen=cfg.estimation.max_poses * len(topics))
        self.busy, self.last_outcome, self.time_origin_ns = False, None, None
        self._running = None  # (start, end) of the event being fitted
        self._reset_requested = False
        self.output_path = resolve_resource(cfg.objects_output) if cfg.objects_output else default_objects_path()
        if cfg.save_on_shutdown:
            check_output_path(self.output_path, force=True, kind="file", what="objects_output")
        self.published, self.saved = 0, []
        self._frame = cfg.pose_frame or None
        logger = handle.get_logger()
        self.inputs, self._rates = {}, {}
        for name, topic in topics.items():
            self.inputs[name] = InputMonitor(self._converter(topic), timeout_s=cfg.input_timeout, what=topic, logger=logger)
            self._rates[name] = InputRates()
            handle.create_subscription(POSE_STAMPED, topic, lambda msg, name=name: self._on_pose(name, msg), SENSOR_QOS)
        trigger_services(self, "save_objects", "objects.yaml", "a fit is running; call again in a moment",
                         "estimator reset when the running fit ends", "object estimator reset")
        self.diagnostics = handle.create_publisher(DIAGNOSTIC_ARRAY, "/diagnostics", 10)
        handle.create_timer(_DIAGNOSTICS_PERIOD, self._publish_diagnostics)
        self.estimates = handle.create_publisher(FLOAT64_MULTI_ARRAY, "~/estimates", LATCHED_QOS)
        handle.create_timer(cfg.update_check_period, self._update)
        if cfg.save_on_shutdown:
            handle.add_on_shutdown(self.save)
        logger.info(f"estimating {list(self.scene.unknowns)} of {list(topics)} from {list(topics.values())}; "
                    f"objects.yaml -> {self.output_path}")

    @staticmethod
    def _camera_pose(calibration_file):
        if not calibration_file:
            return None
        calibration = load_calibration(resolve_resource(calibration_file))
        if calibration.camera_pose is None:
            raise ValueError(f"{calibration_file}: no camera.pose; set calibration_file '' if the poses are in the base frame")
        return check_camera_pose(calibration.camera_pose)

    def _new_estimator(self):
        try:
            return OnlineObjectEstimator(self.scene.world(), self.scene.unknowns, self.config.estimation,
                                         initial=self.scene.initial_guess)
        except ValueError as err:
            raise ValueError(f"node '{self.handle.name}': invalid estimator parameters: {err}") from None

    def _converter(self, topic):
        """PoseStamped -> PoseSample, refusing poses in another frame and outside the camera's reach."""
        workspace = PoseWorkspace.default()

        def convert(msg):
            sample = pose_stamped_to_sample(msg, topic)
            if self._frame is None:
                self._frame = sample.frame_id  # the first pose names the frame of every later one
            if sample.frame_id != self._frame:
                raise MessageConversionError(f"pose in frame '{sample.frame_id}', expected '{self._frame}'")
            reason = workspace.violation(sample.position) if sample.is_finite() else None
            if reason is not None:
                raise MessageConversionError(reason)
            return sample

        return convert

    # ------------------------------------------------------------------ inputs
    def _on_pose(self, name, msg):
        sample = self.inputs[name].update(msg, self.handle.now_ns())  # logs what it drops
        if sample is None:
            return
        position, quaternion = sample.position, sample.quaternion
        if self.camera_pose is not None:
            position, quaternion = (a[0] for a in camera_to_base(self.camera_pose, position, quaternion))
        stamp = sample.stamp_ns or self.handle.now_ns()
        if self.time_origin_ns is None:
            self.time_origin_ns = stamp
        # Seconds since the first pose: absolute stamps in float seconds lose 0.2 µs to rounding.
        args = (name, (stamp - self.time_origin_ns) / NS_PER_S, position, quaternion)
        if self.busy:
            self._pending.append(args)
        else:
            self.estimator.add_pose(*args)

    # ------------------------------------------------------------------ events
    def _update(self):
        if self.busy:
            return
        event = self.estimator.next_event()  # cheap: finds a completed event in the window
        if event is None:
            return
        if not isinstance(event, tuple):  # an event that cannot be fitted (already recorded)
            self._report(event)
            return
        self.busy, self._running = True, event[:2]
        estimator = self.estimator
        self.handle.run_in_background(lambda: estimator.fit_event(*event), self._fit_done)

    def _fit_done(self, result, error):
        """Back on the node's callbacks: record the verdict, publish an accepted estimate, catch up on poses."""
        self.busy = False
        pending, self._pending = self._pending, collections.deque(maxlen=self._pending.maxlen)
        if self._reset_requested:
            self._reset()
            return
        if error is not None:  # recorded as a rejected event: the counts say what became of every event
            self.last_outcome = EventOutcome(*self._running, "rejected", f"fit failed: {type(error).__name__}: {error}")
            self.estimator.apply(self.last_outcome)
            self.handle.get_logger().error(f"object fit failed: {type(error).__name__}: {error}")
            changed = False
        else:
            changed = self.estimator.apply(*result)
            self._report(result[0])
        if changed:
            self.estimates.publish(estimates_msg(self.handle.messages, self.estimator.values, self.estimator.std))
            self.published += 1
        for args in pending:
            self.estimator.add_pose(*args)

    def _report(self, outcome):
        self.last_outcome = outcome
        span = f"event {outcome.start:.3f}..{outcome.end:.3f} s (since the first pose)"
        if outcome.accepted:
            summary = ", ".join(f"{n}={v:.4g}±{outcome.std[n]:.2g}" for n, v in outcome.values.items())
            combined = ", ".join(f"{n}={v:.4g}±{self.estimator.std[n]:.2g}" for n, v in self.estimator.values.items())
            self.handle.get_logger().info(f"{span} accepted ({outcome.seconds:.2f} s fit): {summary}; combined: {combined}")
        else:
            self.handle.get_logger().warning(f"{span} {outcome.status}: {outcome.reason}")

    # ------------------------------------------------------------------ objects.yaml
    def save(self, path=None):
        """Write objects.yaml (atomically); returns its path, or None when nothing was accepted."""
        if not self.estimator.values:
            self.handle.get_logger().warning("no accepted object estimates yet: objects.yaml not saved")
            return None
        path = self.output_path if path is None else Path(path)
        document = self.estimator.document(known=self.scene.known)
        document["online"]["time_origin_ns"] = self.time_origin_ns  # event times are seconds since this stamp
        with atomic_file(path, "w") as handle:
            handle.write(yaml.safe_dump(document, sort_keys=False))
        self.saved.append(path)
        self.handle.get_logger().info(f"object estimates saved to {path}")
        return path

    def _reset(self):
        """``~/reset``: forget poses and estimates."""
        self.estimator, self.last_outcome, self._reset_requested = self._new_estimator(), None, False
        self.time_origin_ns = None
        self.handle.get_logger().info("object estimator reset: poses and estimates forgotten")

    # ------------------------------------------------------------------ diagnostics
    def _publish_diagnostics(self):
        now_ns, label = self.handle.now_ns(), node_label(self.handle)
        statuses = [input_status(f"{label}: {monitor.what}", monitor, self._rates[name], now_ns)
                    for name, monitor in self.inputs.items()]
        statuses.append(self._health(label))
        self.diagnostics.publish(diagnostic_array_msg(self.handle.messages, now_ns, statuses))

    def _health(self, label):
        est, last = self.estimator, self.last_outcome
        values = {"unknowns": ",".join(self.scene.unknowns), "fit running": self.busy, "estimates published": self.published,
                  "events accepted": est.counts["accepted"], "events rejected": est.counts["rejected"],
                  "events skipped": est.counts["skipped"], "queued poses": len(self._pending),
                  "poses refused by the estimator": est.dropped}
        if est.noise is not None:
            values["camera noise [mm]"] = f"{est.noise.position * 1e3:.3f}"
        values.update({f"{n} (value, std)": f"{v:.6g}, {est.std[n]:.3g}" for n, v in est.values.items()})
        if last is None:
            return status(OK if est.values else WARN, f"{label}: object estimator", "no event yet", values)
        values.update({"last event [s]": f"{last.start:.3f}..{last.end:.3f}", "last fit [s]": f"{last.seconds:.3f}"})
        level = OK if last.accepted or est.values else WARN
        return status(level, f"{label}: object estimator", f"last event {last.status}: {last.reason}", values)


def main(args=None):
    """Entry point of ``ros2 run diffsim_ros object_estimator_node`` (exit code 0, or 1 after a start-up error)."""
    exit_process(run_node(ObjectEstimatorNode, "object_estimator", args))


if __name__ == "__main__":
    main()
