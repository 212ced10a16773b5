"""The Python heap of a node process: keep the cyclic garbage collector out of the control loop.

A node process holds about 200,000 objects of torch, rclpy and the model that live as long as
it does. Every full collection traverses them all: 120-220 ms on the 2-core machine, during
which no callback runs, so the 200 Hz command stream stalled for as long (Baxter leaves
torque mode after 200 ms without commands). :func:`freeze_heap`, called once the node is
built, moves them to the permanent generation (``gc.freeze``); later collections traverse only
what the running node allocates. :class:`GcPauses` measures the pauses that remain.
"""

import gc
import time

__all__ = ["GcPauses", "freeze_heap", "frozen_objects"]

_frozen = 0  # objects frozen by the last freeze_heap (see frozen_objects)


def freeze_heap():
    """Collect once, then exempt every object alive now from future collections.

    Its own collection is not reported to ``gc.callbacks`` (:class:`GcPauses`): it runs before
    the node's callbacks do, and no loop waits for it.

    Returns:
        Number of objects frozen.
    """
    callbacks = list(gc.callbacks)
    gc.callbacks.clear()
    try:
        gc.collect()
    finally:
        gc.callbacks.extend(callbacks)
    gc.freeze()
    global _frozen
    _frozen = gc.get_freeze_count()
    return _frozen


def frozen_objects():
    """Number of objects :func:`freeze_heap` froze (0 before it ran).

    Read from the count taken at freezing: ``gc.get_freeze_count`` walks the whole permanent
    generation (40 ms for 400,000 objects on the 2-core machine), which in a diagnostics callback
    stalled the control loop once a second.
    """
    return _frozen


class GcPauses:
    """Wall-clock durations of the garbage collector's runs in this process (``gc.callbacks``).

    Attributes:
        largest_ms: Longest collection so far [ms].
        collections: Number of collections seen.
        full_collections: Number of generation-2 collections seen.
    """

    def __init__(self):
        self.largest_ms, self.collections, self.full_collections = 0.0, 0, 0
        self._start = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            pause = (time.perf_counter() - self._start) * 1e3
            self.largest_ms = max(self.largest_ms, pause)
            self.collections += 1
            self.full_collections += info.get("generation") == 2
            self._start = None

    def close(self):
        """Stop measuring (removes the callback)."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
