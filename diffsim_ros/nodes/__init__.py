"""diffsim_ros.nodes: the ROS 2 nodes, one class per module, each with ``main(args=None)``.

A node runs as its own process on a workstation whose cores it shares with the controller and
other nodes: the native thread pools (BLAS, OpenMP) default to one thread here, before any node
module imports numpy or torch (:func:`diffsim_ros.threads.limit_native_threads`).
"""

from diffsim_ros.threads import limit_native_threads

limit_native_threads()
