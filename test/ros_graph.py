"""Real ROS 2 in tests: DDS isolation, node processes, an in-process probe, baxter_core_msgs.

DDS never leaves this machine: every ROS test runs with

* ``FASTDDS_BUILTIN_TRANSPORTS=SHM`` (shared-memory transport),
* ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``,
* its own ``ROS_DOMAIN_ID`` (:func:`next_domain_id`: from the process id and a counter, so
  parallel test sessions and other engineers' graphs on the machine do not meet),
* ``FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_localhost.xml``: UDP bound to 127.0.0.1,
  unicast discovery to 127.0.0.1, no multicast.

ROS tests skip only where the ROS 2 wheels cannot be installed (:data:`ROS_SKIP_REASON` says
why); ``make test`` installs them (the ``[ros]`` extra).
"""

import contextlib
import hashlib
import importlib.util
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from oracles import REPO

__all__ = ["NodeProcess", "Probe", "ROS_SKIP_REASON", "baxter_msgs", "dds_environment", "executable",
           "next_domain_id", "rclpy_context", "requires_ros", "spin_until"]

FASTDDS_PROFILE = REPO / "config" / "fastdds_localhost.xml"
PARAMS = REPO / "config"


def _skip_reason():
    if importlib.util.find_spec("rclpy") is not None:
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version != "3.11" or not sys.platform.startswith("linux"):
        return (f"rclpy is not installed: the ROS 2 Kilted wheels of the package index are for CPython 3.11 on "
                f"Linux x86_64, this is Python {version} on {sys.platform}")
    return "rclpy is not installed: run `make test` (it installs the [ros] extra) or pip install -e '.[ros]'"


ROS_SKIP_REASON = _skip_reason()
requires_ros = pytest.mark.skipif(ROS_SKIP_REASON is not None, reason=ROS_SKIP_REASON or "")
_DOMAINS = itertools.count()


def _interface_cache():
    """Where built interface packages are kept between test sessions (per interpreter prefix)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]  # venvs never rebuild each other's packages
    return root / "diffsim_ros" / "ros_interfaces" / prefix


@pytest.fixture(scope="session")
def baxter_msgs():
    """baxter_core_msgs built from the shipped .msg files (ament_cmake + rosidl + colcon, ~17 s;
    cached across sessions), importable in this process; ``.environment(env)`` for node processes."""
    if ROS_SKIP_REASON is not None:
        pytest.skip(ROS_SKIP_REASON)
    from diffsim_ros.runtime.interfaces import baxter_core_msgs

    package = baxter_core_msgs(_interface_cache())
    package.load_in_process()
    return package


def next_domain_id():
    """A ROS_DOMAIN_ID of its own for each test (1..100; Fast DDS ports stay below 65536).

    Each pytest-xdist worker draws from its own range, so graphs of concurrent workers never share a domain.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    size = 100 // workers
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return 1 + index * size + (os.getpid() * 7 + next(_DOMAINS)) % size


@contextlib.contextmanager
def rclpy_context():
    """An in-process rclpy Context on a domain of its own, loopback-only DDS (skips the test without ROS)."""
    if ROS_SKIP_REASON is not None:
        pytest.skip(ROS_SKIP_REASON)
    import rclpy

    domain = next_domain_id()
    os.environ.update(dds_environment(domain))
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        yield context
    finally:
        rclpy.try_shutdown(context=context)


def spin_until(executor, predicate, timeout=10.0, each=None):
    """Spin ``executor`` until ``predicate()`` (calling ``each()`` before every spin) or ``timeout`` [s]; the predicate."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        if each is not None:
            each()
        executor.spin_once(timeout_sec=0.02)
    return predicate()


def dds_environment(domain_id, base=None):
    """``base`` (default os.environ) with the loopback-only DDS settings of the module docstring."""
    env = dict(os.environ if base is None else base)
    env.update({
        "ROS_DOMAIN_ID": str(domain_id),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "FASTDDS_BUILTIN_TRANSPORTS": "SHM",
        "FASTDDS_DEFAULT_PROFILES_FILE": str(FASTDDS_PROFILE),
        "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp",
        "PYTHONUNBUFFERED": "1",
        "RCUTILS_COLORIZED_OUTPUT": "0",
    })
    env.pop("ROS_LOCALHOST_ONLY", None)  # deprecated; conflicts with the discovery range
    return env


def executable(name):
    """An installed console script of the package (pip puts them beside the interpreter)."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise FileNotFoundError(f"{name} is not installed beside {sys.executable} (pip install -e .)")
    return path


class NodeProcess:
    """A node executable as its own process, output captured (``--ros-args`` as on the command line).

    Args:
        name: Console script (``controller_node``...).
        env: Environment (see :func:`dds_environment`).
        params_file: ``--params-file``.
        parameters: ``-p name:=value`` overrides (values written as YAML).
        log_dir: Where the output goes (``<name>.log``).
    """

    def __init__(self, name, env, params_file=None, parameters=None, log_dir=None, remaps=()):
        args = [str(executable(name)), "--ros-args"]
        if params_file:
            args += ["--params-file", str(params_file)]
        for key, value in (parameters or {}).items():
            args += ["-p", f"{key}:={_yaml(value)}"]
        for remap in remaps:
            args += ["-r", remap]
        self.name, self.args = name, args
        self.log_path = Path(log_dir or ".") / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    @property
    def pid(self):
        return self.process.pid

    def output(self):
        """Everything the process wrote so far."""
        self._log.flush()
        return self.log_path.read_text()

    def signal(self, sig):
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout):
        """Exit code, or None if still running after ``timeout`` [s]."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        """SIGINT, then SIGKILL if it does not exit within 5 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            if self.wait(5.0) is None:
                self.process.kill()
                self.process.wait()
        self._log.close()


def _yaml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_yaml(v) for v in value) + "]"
    if isinstance(value, str):
        return f"'{value}'" if value else "''"
    return repr(value)


class Probe:
    """An rclpy node in the test process, spinning on its own thread, recording what arrives.

    Each subscription stores ``(time.monotonic(), msg)``; ``received[topic]``.
    """

    def __init__(self, domain_id, name="diffsim_probe"):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        os.environ.update({k: v for k, v in dds_environment(domain_id).items() if k != "PYTHONUNBUFFERED"})
        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.received, self._lock = {}, threading.Lock()
        self._running = True
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self):
        while self._running and self.context.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def subscribe(self, msg_class, topic, qos=10):
        self.received.setdefault(topic, [])

        def store(msg, topic=topic):
            with self._lock:
                self.received[topic].append((time.monotonic(), msg))

        return self.node.create_subscription(msg_class, topic, store, qos)

    def messages(self, topic):
        with self._lock:
            return list(self.received.get(topic, []))

    def wait_for(self, predicate, timeout, what="condition"):
        """Poll ``predicate()`` until true; fail the test naming ``what`` after ``timeout`` [s]."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        pytest.fail(f"timed out after {timeout:g} s waiting for {what}")

    def publish_joint_states(self, topic, model, stop, period):
        """Joint states of ``model``'s arm swinging slowly about mid-range, every ``period`` [s] until ``stop()``."""
        import numpy as np
        from sensor_msgs.msg import JointState

        publisher = self.node.create_publisher(JointState, topic, 10)
        q0, k = 0.5 * (model.lower.numpy() + model.upper.numpy()), 0
        while not stop():
            t = k * period
            msg = JointState(name=list(model.joint_names), position=(q0 + 0.1 * np.sin(t)).tolist(),
                             velocity=np.full(model.nq, 0.1 * np.cos(t)).tolist(), effort=[0.0] * model.nq)
            msg.header.stamp = self.node.get_clock().now().to_msg()
            publisher.publish(msg)
            k += 1
            time.sleep(period)

    def call(self, srv_class, name, request, timeout=10.0):
        """Call a service; returns the response."""
        client = self.node.create_client(srv_class, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                pytest.fail(f"service {name} not available within {timeout:g} s")
            future = client.call_async(request)
            self.wait_for(future.done, timeout, f"the response of {name}")
            return future.result()
        finally:
            self.node.destroy_client(client)

    def close(self):
        self._running = False
        self._thread.join(timeout=2.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)
