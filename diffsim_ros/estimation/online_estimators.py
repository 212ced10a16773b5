"""The online estimator a configuration selects: windowed batch refits or streaming statistics."""

from diffsim_ros.estimation.online import OnlineEstimator
from diffsim_ros.estimation.streaming import StreamingEstimator

__all__ = ["make_online_estimator", "refresh_period"]


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
