"""Pipelines: the library's layers run end to end, above the nodes and below the CLI.

* :mod:`~diffsim_ros.pipelines.calibration` — bag -> identification -> calibration.yaml,
  calibrated URDF, report.png (``diffsim-ros calibrate``);
* :mod:`~diffsim_ros.pipelines.objects` — scene + bag -> object fit -> objects.yaml, summary,
  figure (``diffsim-ros estimate-objects``);
* :mod:`~diffsim_ros.pipelines.demo` — the simulated Baxter graph (sim robot, estimator,
  controller nodes on the embedded runtime) calibrating itself online (``diffsim-ros demo``);
* :mod:`~diffsim_ros.pipelines.kernels` — the numba kernel families compiled once, ahead of use
  (``python -m diffsim_ros.pipelines.kernels``; ``make test`` runs it first).

Pipelines sit above ``nodes/`` because the demo runs nodes; they import ``viz/`` for their
figures and ``testbed/`` for the demo's poses. The CLI keeps argparse and printing only.
"""

__all__ = []
