"""runtime/heap.py: the start-up heap is frozen out of the garbage collector, and its pauses are measured.

Run in a child interpreter: freezing is process-wide, and the test worker's heap must stay as it is.
"""

import subprocess
import sys

CHILD = r"""
import gc
from diffsim_ros.runtime.heap import GcPauses, freeze_heap, frozen_objects

keep = []
for _ in range(50_000):  # long-lived objects in reference cycles, as a node's start-up leaves
    a, b = [], []
    a.append(b)
    b.append(a)
    keep.append(a)
tracked_before = len(gc.get_objects())
pauses = GcPauses()  # (a node builds its monitor before run_node freezes the heap)
frozen = freeze_heap()
assert pauses.collections == 0, "the start-up collection was reported as a pause"
gc.get_freeze_count = None  # frozen_objects must not walk the permanent generation again (40 ms)
assert frozen_objects() == frozen
garbage = [[] for _ in range(10)]
garbage[0].append(garbage)  # one new cycle, collected by the next full collection
del garbage
gc.collect()
print(tracked_before, frozen, len(gc.get_objects()), pauses.collections, pauses.full_collections, pauses.largest_ms)
pauses.close()
gc.collect()
print(pauses.collections)
"""


def test_freeze_heap_leaves_collections_only_the_new_objects():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout.split("\n")
    before, frozen, after, collections, full, largest = out[0].split()
    assert int(frozen) >= 100_000 and int(frozen) >= int(before) - 1_000  # the cycles and everything else alive
    assert int(after) < 1_000  # what a full collection still traverses
    assert int(collections) >= 1 and int(full) >= 1 and float(largest) >= 0.0
    assert out[1] == collections  # closed: no longer counting
