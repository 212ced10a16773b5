"""Independent references for the tests: Pinocchio and MuJoCo built from the same URDF.

Only the URDF text is shared with diffsim_ros; kinematics and dynamics come from the oracles.
"""

import re
import sysconfig
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BAXTER_URDF = REPO / "urdf" / "baxter.urdf"
BAXTER_LEFT = REPO / "config" / "baxter_left.yaml"
BAXTER_RIGHT = REPO / "config" / "baxter_right.yaml"


def example_robot_urdf(relative):
    """Path of a URDF shipped by the example-robot-data wheel (cmeel prefix)."""
    root = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix" / "share" / "example-robot-data" / "robots"
    return root / relative


# (URDF, base_link, tip_link) of public arms used as extra references.
EXAMPLE_ARMS = {
    "ur5": ("ur_description/urdf/ur5_robot.urdf", None, None),
    "panda_finger": ("panda_description/urdf/panda.urdf", None, "panda_leftfinger"),  # 7 revolute + prismatic
    "kinova_continuous": ("kinova_description/robots/kinova.urdf", None, None),
    "z1_chain": ("z1_description/urdf/z1.urdf", "link00", "gripperStator"),
}


def _pin_safe_xml(path):
    """URDF text with joints renamed where they share a link's name (Pinocchio frame lookups clash)."""
    xml = Path(path).read_text()
    links = set(re.findall(r'<link\s+name="([^"]+)"', xml))
    for name in set(re.findall(r'<joint\s+name="([^"]+)"', xml)) & links:
        xml = re.sub(rf'<joint(\s+)name="{re.escape(name)}"', rf'<joint\1name="{name}__joint"', xml)
    return xml


class PinocchioOracle:
    """Pinocchio model of the same URDF, reduced to our model's actuated joints."""

    def __init__(self, model, urdf_path):
        import pinocchio as pin

        self.pin = pin
        full = pin.buildModelFromXML(_pin_safe_xml(urdf_path))
        names = list(full.names)[1:]
        lock_ids, ref = [], pin.neutral(full)
        for name in names:
            if name in model.joint_names:
                continue
            jid = full.getJointId(name)
            lock_ids.append(jid)
            joint = full.joints[jid]
            if joint.nq == 1:  # lock at 0 clamped into the limits, as diffsim_ros does
                lo, hi = full.lowerPositionLimit[joint.idx_q], full.upperPositionLimit[joint.idx_q]
                ref[joint.idx_q] = min(max(0.0, lo), hi)
        self.model = pin.buildReducedModel(full, lock_ids, ref) if lock_ids else full
        self.model.gravity.linear = np.array([0.0, 0.0, -9.81])
        self.data = self.model.createData()
        self.joints = [self.model.joints[self.model.getJointId(n)] for n in model.joint_names]
        self.v_index = np.array([j.idx_v for j in self.joints])

    def q(self, q):
        """Pinocchio configuration of our joint angles (continuous joints as cos/sin)."""
        out = self.pin.neutral(self.model)
        for joint, value in zip(self.joints, q):
            if joint.nq == 2:
                out[joint.idx_q : joint.idx_q + 2] = (np.cos(value), np.sin(value))
            else:
                out[joint.idx_q] = value
        return out

    def v(self, v):
        out = np.zeros(self.model.nv)
        out[self.v_index] = v
        return out

    def sel(self, vec):
        return np.asarray(vec)[self.v_index]

    def sel2(self, mat):
        return np.asarray(mat)[np.ix_(self.v_index, self.v_index)]

    def frame_id(self, link):
        return self.model.getFrameId(link, self.pin.BODY)


def mujoco_model(urdf_path):
    """MuJoCo model of a URDF with geometry stripped, fixed joints kept, inertias as given."""
    import mujoco

    xml = Path(urdf_path).read_text()
    xml = re.sub(r"<(visual|collision)\b.*?</\1>", "", xml, flags=re.S)
    xml = re.sub(r"<gazebo\b.*?</gazebo>", "", xml, flags=re.S)
    xml = re.sub(
        r"(<robot[^>]*>)",
        r'\1<mujoco><compiler discardvisual="true" fusestatic="false" balanceinertia="false"/></mujoco>',
        xml,
        count=1,
    )
    model = mujoco.MjModel.from_xml_string(xml)
    model.dof_damping[:] = 0.0
    model.dof_frictionloss[:] = 0.0
    model.dof_armature[:] = 0.0
    model.opt.gravity[:] = (0.0, 0.0, -9.81)
    return model
