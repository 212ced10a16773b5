"""Backend-neutral QoS profiles: reliability, durability, history depth.

Both backends map :class:`QosProfile` onto their own QoS (rclpy ``QoSProfile``; the embedded
runtime's queues and latched history) and the recorder writes it to bags as the offered
profile, so ``ros2 bag play`` republishes with the same QoS.
"""

from dataclasses import dataclass

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

__all__ = [
    "BEST_EFFORT",
    "CLOCK_QOS",
    "COMMAND_QOS",
    "KEEP_ALL",
    "KEEP_LAST",
    "LATCHED_QOS",
    "QosProfile",
    "RELIABLE",
    "SENSOR_QOS",
    "TRANSIENT_LOCAL",
    "VOLATILE",
    "as_qos_profile",
    "incompatibility",
    "to_bag_qos",
]

RELIABLE = "reliable"
BEST_EFFORT = "best_effort"
VOLATILE = "volatile"
TRANSIENT_LOCAL = "transient_local"
KEEP_LAST = "keep_last"
KEEP_ALL = "keep_all"

_RELIABILITIES = (RELIABLE, BEST_EFFORT)
_DURABILITIES = (VOLATILE, TRANSIENT_LOCAL)
_HISTORIES = (KEEP_LAST, KEEP_ALL)
_UNSPECIFIED = QosTime(0, 0)  # rmw default duration (infinite deadline/lifespan/lease)


@dataclass(frozen=True)
class QosProfile:
    """QoS of a publisher or subscription.

    Attributes:
        depth: Queue length of KEEP_LAST history (messages kept per subscription/publisher).
        reliability: "reliable" or "best_effort".
        durability: "volatile" or "transient_local" (late joiners get the last ``depth`` messages).
        history: "keep_last" or "keep_all".
    """

    depth: int = 10
    reliability: str = RELIABLE
    durability: str = VOLATILE
    history: str = KEEP_LAST

    def __post_init__(self):
        for value, allowed, what in (
            (self.reliability, _RELIABILITIES, "reliability"),
            (self.durability, _DURABILITIES, "durability"),
            (self.history, _HISTORIES, "history"),
        ):
            if value not in allowed:
                raise ValueError(f"QoS {what} must be one of {allowed}, got {value!r}")
        if not isinstance(self.depth, int) or isinstance(self.depth, bool) or self.depth < 1:
            raise ValueError(f"QoS depth must be a positive int, got {self.depth!r}")


# Joint states and camera poses: the newest sample matters, a lost one does not (rclpy
# qos_profile_sensor_data uses depth 5).
SENSOR_QOS = QosProfile(depth=5, reliability=BEST_EFFORT)
# Torque commands: reliable, as ros2_control's JointGroupEffortController subscribes.
COMMAND_QOS = QosProfile(depth=1, reliability=RELIABLE)
# Late joiners get the last value (calibration results, robot description).
LATCHED_QOS = QosProfile(depth=1, reliability=RELIABLE, durability=TRANSIENT_LOCAL)
# rclpy's /clock subscription.
CLOCK_QOS = QosProfile(depth=1, reliability=BEST_EFFORT)


def as_qos_profile(qos):
    """A QosProfile from a QosProfile or a depth (int), as rclpy accepts a depth for QoS."""
    if isinstance(qos, QosProfile):
        return qos
    if isinstance(qos, int) and not isinstance(qos, bool):
        return QosProfile(depth=qos)
    raise TypeError(f"qos must be a QosProfile or a history depth (int), got {qos!r}")


def incompatibility(offered, requested):
    """Why a publisher's QoS cannot serve a subscription (DDS request/offer rules), or None.

    Args:
        offered: Publisher QosProfile.
        requested: Subscription QosProfile.
    """
    if offered.reliability == BEST_EFFORT and requested.reliability == RELIABLE:
        return "the subscription requests reliable delivery, the publisher offers best effort"
    if offered.durability == VOLATILE and requested.durability == TRANSIENT_LOCAL:
        return "the subscription requests transient_local durability, the publisher offers volatile"
    return None


def to_bag_qos(qos):
    """rosbags ``Qos`` of a QosProfile (the offered profile recorded in bags)."""
    qos = as_qos_profile(qos)
    return Qos(
        QosHistory.KEEP_LAST if qos.history == KEEP_LAST else QosHistory.KEEP_ALL,
        qos.depth,
        QosReliability.RELIABLE if qos.reliability == RELIABLE else QosReliability.BEST_EFFORT,
        QosDurability.VOLATILE if qos.durability == VOLATILE else QosDurability.TRANSIENT_LOCAL,
        _UNSPECIFIED,
        _UNSPECIFIED,
        QosLiveliness.AUTOMATIC,
        _UNSPECIFIED,
        False,
    )
