"""The online estimator a configuration selects: windowed batch refits or streaming statistics."""

from diffsim_ros.estimation.online import OnlineEstimator
from diffsim_ros.estimation.streaming import StreamingEstimator

__all__ = ["cpu_share", "make_online_estimator", "refresh_period"]


def make_online_estimator(model, config, camera_frame=None, camera_pose=None, settings=None):
    """:class:`~diffsim_ros.estimation.online.OnlineEstimator` (``config.method == "batch"``) or
    :class:`~diffsim_ros.estimation.streaming.StreamingEstimator` (``"streaming"``), same interface.

    Raises:
        ValueError: The configuration asks what the selected estimator cannot do (named).
    """
    kind = StreamingEstimator if config.method == "streaming" else OnlineEstimator
    return kind(model, config, camera_frame=camera_frame, camera_pose=camera_pose, settings=settings)


def refresh_period(config):
    """Seconds between the updates of the selected estimator [s]."""
    return config.refresh_period if config.method == "streaming" else config.update_period


def cpu_share(updates, last=None):
    """Estimator CPU [s] per second of stream over ``updates`` (the ``last`` ones), nan with fewer than two.

    Args:
        updates: OnlineUpdate records in time order (their ``cpu_seconds`` and ``time`` [s]).
        last: Only the newest this many (None: all).
    """
    updates = list(updates)[-last:] if last else list(updates)
    if len(updates) < 2 or not updates[-1].time > updates[0].time:
        return float("nan")
    return sum(u.cpu_seconds for u in updates[1:]) / (updates[-1].time - updates[0].time)
