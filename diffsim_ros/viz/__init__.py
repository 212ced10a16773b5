"""Figures (PNG, matplotlib's Agg backend), above the library layers: they draw, never compute.

* :mod:`~diffsim_ros.viz.calibration` — the offline calibration's ``report.png``;
* :mod:`~diffsim_ros.viz.objects` — observed and fitted object trajectories;
* :mod:`~diffsim_ros.viz.torque_map` — torque-map heat maps;
* :mod:`~diffsim_ros.viz.demo` — the demo's ``report.png``.
"""

__all__ = []
