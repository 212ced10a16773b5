"""runtime/scheduling.py: SCHED_FIFO for a whole control process, or none of it, and normal background work.

Each case runs in a child interpreter: the scheduling policy is per process and must not leak
into the test worker.
"""

import os
import subprocess
import sys

import pytest

from diffsim_ros.runtime.scheduling import use_realtime_priority

CHILD = r"""
import os, sys, threading
from diffsim_ros.runtime.scheduling import lower_thread_priority, use_realtime_priority

if sys.argv[1] == "unprivileged":
    os.setuid(65534)  # nobody: no CAP_SYS_NICE, RLIMIT_RTPRIO of a plain user
ready, release = threading.Event(), threading.Event()
early = threading.Thread(target=lambda: (ready.set(), release.wait()), daemon=True)
early.start()
ready.wait()
why_not = use_realtime_priority(20)
policies = {}

def background():
    policies["later"] = os.sched_getscheduler(0)
    lower_thread_priority(5)
    policies["background"] = os.sched_getscheduler(0)

thread = threading.Thread(target=background)
thread.start()
thread.join()
policies["early"] = os.sched_getscheduler(early.native_id)
policies["main"] = os.sched_getscheduler(0)
pid = os.fork()  # (the interpreter itself may not be executable for nobody)
if pid == 0:
    os._exit(os.sched_getscheduler(0))
policies["child process"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
release.set()
print(repr(why_not))
flag = getattr(os, "SCHED_RESET_ON_FORK", 0)
print({k: {os.SCHED_FIFO: "fifo", os.SCHED_OTHER: "other"}.get(v & ~flag, v) for k, v in policies.items()})
"""


def _run(case):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, env=env, check=True,
                         timeout=60)
    why_not, policies = out.stdout.strip().split("\n")
    return eval(why_not), eval(policies)


def test_realtime_priority_is_all_threads_or_none_and_never_background_work():
    why_not, policies = _run("as_is")
    if why_not is None:  # permitted (root, or rtprio granted)
        # The threads alive when it was asked for (executor, timers, DDS) run real-time; threads
        # and processes started later (background work, map rebuilds) do not.
        assert policies == {"later": "other", "background": "other", "early": "fifo", "main": "fifo",
                            "child process": "other"}
    else:
        assert "rtprio" in why_not and set(policies.values()) == {"other"}


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to drop to an unprivileged user")
def test_without_permission_it_says_so_and_nothing_changes():
    why_not, policies = _run("unprivileged")
    assert "no permission for SCHED_FIFO" in why_not and "limits.conf" in why_not
    assert set(policies.values()) == {"other"}


def test_priority_outside_1_to_99_is_refused():
    with pytest.raises(ValueError, match="within 1-99"):
        use_realtime_priority(0)
    with pytest.raises(ValueError, match="within 1-99"):
        use_realtime_priority(100)
