"""CPU scheduling of a node process (Linux): real-time priority for control, niceness for background work.

A torque controller shares the cores with the estimator, drivers and whatever else runs on the
robot workstation. Under the default scheduler its 200 Hz cycle waits whenever the cores are
busy; Baxter leaves torque mode after 200 ms without a command. As ros2_control's
controller_manager does (``thread_priority``, default 50), the controller process can run at
``SCHED_FIFO``: it then runs as soon as it is ready. That needs the rtprio permission
(``/etc/security/limits.conf``, e.g. ``@realtime - rtprio 99``); without it the caller is told
why and normal scheduling stays.
"""

import os
import threading

__all__ = ["leave_realtime", "lower_thread_priority", "use_realtime_priority"]


def use_realtime_priority(priority):
    """Run every thread of this process at ``SCHED_FIFO`` ``priority``.

    Threads and processes started later run at normal priority (``SCHED_RESET_ON_FORK``
    applies to every clone): background work and map rebuilds must not compete with the loop.
    Call it once the executor and the middleware have started their threads.

    Args:
        priority: 1-99.

    Returns:
        None, or why the priority could not be set (normal scheduling then stays).
    """
    if not 1 <= int(priority) <= 99:
        raise ValueError(f"real-time priority must be within 1-99, got {priority}")
    if not hasattr(os, "sched_setscheduler"):
        return "real-time scheduling needs Linux"
    policy = os.SCHED_FIFO | getattr(os, "SCHED_RESET_ON_FORK", 0)
    try:
        for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(int(priority)))
            except ProcessLookupError:  # a thread that ended meanwhile
                pass
    except PermissionError:
        leave_realtime(all_threads=True)  # none or all: a half real-time process is worse than neither
        return ("no permission for SCHED_FIFO (grant rtprio in /etc/security/limits.conf, "
                "as for ros2_control); running at normal priority")
    return None


def leave_realtime(all_threads=False):
    """Return the calling thread (or every thread) to normal scheduling, if it was real-time."""
    tids = [int(t) for t in os.listdir("/proc/self/task")] if all_threads else [threading.get_native_id()]
    for tid in tids:
        try:
            if os.sched_getscheduler(tid) in (os.SCHED_FIFO, os.SCHED_RR):
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except (AttributeError, OSError):
            pass


def lower_thread_priority(niceness):
    """Normal scheduling for the calling thread, niced by ``niceness`` relative to its priority now.

    A background thread of a real-time node inherits ``SCHED_FIFO`` and would then preempt the
    loop it must yield to; it leaves it first. Linux applies PRIO_PROCESS to a thread id;
    elsewhere a no-op.
    """
    try:
        leave_realtime()
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + int(niceness)))
    except (AttributeError, OSError):  # not Linux, or not permitted: run at the node's priority
        pass
