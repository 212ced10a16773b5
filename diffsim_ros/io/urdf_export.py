"""Write a calibrated URDF: the source URDF with calibrated inertials, dynamics and payload.

Only what the calibration changed is rewritten, so meshes, collision geometry, transmissions
and everything else stay as in the source:

* a body whose mass, COM or inertia changed gets the calibrated merged inertial on its own
  link, and the links merged into it lose theirs (their mass is part of the merged value);
* joint ``<dynamics damping friction>`` and changed joint origins are updated;
* a joint's armature (reflected rotor inertia), which URDF has no field for, is written as
  Drake's extension: ``<drake:rotor_inertia value="a"/>`` with ``<drake:gear_ratio value="1.0"/>``
  in the ``<actuator>`` of the joint's ``<transmission>`` (one is added where the joint has
  none), which :func:`~diffsim_ros.model.urdf_document.read_urdf` reads back;
* a payload becomes a link welded to the payload frame (a 1 mm solid sphere, i.e. a point
  mass for every practical purpose, since URDF inertias must be positive definite);
* spring elements (lever, torsion and point springs), which URDF cannot express (its
  ``<dynamics>`` has damping and friction only, no stiffness or rest position), are
  recorded with all their values in a comment (and in ``calibration.yaml``).
"""

from pathlib import Path

import numpy as np
from lxml import etree

from diffsim_ros.model.inertia import inertia_from_vector
from diffsim_ros.model.urdf_document import DRAKE_NAMESPACE
from diffsim_ros.outputs import atomic_write_text

__all__ = ["export_calibrated_urdf", "PAYLOAD_RADIUS"]

PAYLOAD_RADIUS = 1e-3
"""[m] radius of the solid sphere standing for the point-mass payload."""
_CHANGE_TOL = 1e-12


def _numbers(values):
    return " ".join(repr(float(v)) for v in np.asarray(values, dtype=float).reshape(-1))


def _set_inertial(link, mass, com, inertia):
    for old in link.findall("inertial"):
        link.remove(old)
    inertial = etree.SubElement(link, "inertial")
    etree.SubElement(inertial, "origin", xyz=_numbers(com), rpy="0 0 0")
    etree.SubElement(inertial, "mass", value=repr(float(mass)))
    i = np.asarray(inertia, dtype=float)
    entries = {"ixx": i[0, 0], "ixy": i[0, 1], "ixz": i[0, 2], "iyy": i[1, 1], "iyz": i[1, 2], "izz": i[2, 2]}
    etree.SubElement(inertial, "inertia", **{k: repr(float(v)) for k, v in entries.items()})


def _changed(a, b):
    return bool(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float))) > _CHANGE_TOL)


def _numpy(tensor):
    return tensor.detach().cpu().double().numpy()


def _update_inertials(root, model, nominal):
    links = {link.get("name"): link for link in root.findall("link")}
    p, p0 = model.params, nominal.params
    for body, name in enumerate(model.body_names):
        values = [_numpy(t[body]) for t in (p.mass, p.com, p.inertia)]
        if not any(_changed(v, _numpy(t[body])) for v, t in zip(values, (p0.mass, p0.com, p0.inertia))):
            continue
        _set_inertial(links[name], values[0], values[1], inertia_from_vector(values[2]))
        for frame in model.frames.values():
            if frame.body == body and frame.name != name:
                for old in links[frame.name].findall("inertial"):
                    links[frame.name].remove(old)


def _update_joints(root, model, nominal):
    joints = {joint.get("name"): joint for joint in root.findall("joint")}
    p, p0 = model.params, nominal.params
    for i, name in enumerate(model.joint_names):
        element = joints[name]
        if _changed(p.damping[i], p0.damping[i]) or _changed(p.friction[i], p0.friction[i]):
            dynamics = element.find("dynamics")
            if dynamics is None:
                dynamics = etree.SubElement(element, "dynamics")
            dynamics.set("damping", repr(float(p.damping[i])))
            dynamics.set("friction", repr(float(p.friction[i])))
        xyz = _numpy(p.joint_origin_xyz[i])
        if _changed(xyz, _numpy(p0.joint_origin_xyz[i])):
            parent = element.find("parent").get("link")
            placement = _numpy(model.frame(parent).placement)
            local = placement[:3, :3].T @ (xyz - placement[:3, 3])  # body frame -> parent link frame
            origin = element.find("origin")
            if origin is None:
                origin = etree.SubElement(element, "origin", rpy="0 0 0")
            origin.set("xyz", _numbers(local))


def _actuator_of(root, joint):
    """The ``<actuator>`` of ``joint``'s single-joint transmission, added when there is none."""
    for transmission in root.findall("transmission"):
        if [j.get("name") for j in transmission.findall("joint")] == [joint] and transmission.find("actuator") is not None:
            return transmission.find("actuator")
    transmission = etree.SubElement(root, "transmission", name=f"{joint}_rotor")
    etree.SubElement(transmission, "type").text = "transmission_interface/SimpleTransmission"
    etree.SubElement(transmission, "joint", name=joint)
    return etree.SubElement(transmission, "actuator", name=f"{joint}_motor")


def _update_armatures(root, model, nominal):
    """Write each changed or nonzero armature as Drake's rotor inertia (gear ratio 1).

    Returns:
        Whether any was written (the document then needs the ``drake`` namespace).
    """
    written = False
    for name, value, before in zip(model.joint_names, _numpy(model.params.armature), _numpy(nominal.params.armature)):
        if value == 0.0 and not _changed(value, before):
            continue
        actuator = _actuator_of(root, name)
        for key, number in (("rotor_inertia", value), ("gear_ratio", 1.0)):
            element = actuator.find(f"{{{DRAKE_NAMESPACE}}}{key}")
            if element is None:
                element = etree.SubElement(actuator, f"{{{DRAKE_NAMESPACE}}}{key}")
            element.set("value", repr(float(number)))
        written = True
    return written


def _with_drake_namespace(root):
    """``root`` declaring the ``drake`` prefix (lxml cannot add one to an existing element)."""
    if root.nsmap.get("drake") == DRAKE_NAMESPACE:
        return root
    out = etree.Element(root.tag, attrib=dict(root.attrib), nsmap={**root.nsmap, "drake": DRAKE_NAMESPACE})
    out.text = root.text
    out.extend(list(root))
    etree.cleanup_namespaces(out)
    return out


def _add_payload(root, model):
    mass = float(model.params.payload_mass)
    if mass <= 0.0:
        return
    names = {e.get("name") for e in root.iter("link", "joint")}
    link_name = f"{model.payload_frame}_payload"
    while link_name in names:
        link_name += "_"
    moment = 0.4 * mass * PAYLOAD_RADIUS**2
    link = etree.SubElement(root, "link", name=link_name)
    _set_inertial(link, mass, np.zeros(3), moment * np.eye(3))
    joint = etree.SubElement(root, "joint", name=f"{link_name}_joint", type="fixed")
    etree.SubElement(joint, "parent", link=model.payload_frame)
    etree.SubElement(joint, "child", link=link_name)
    etree.SubElement(joint, "origin", xyz=_numbers(_numpy(model.params.payload_com)), rpy="0 0 0")


def _spring_comment(model):
    lines = [s.describe() for s in model.springs]
    text = "diffsim_ros spring elements (not expressible in URDF; see calibration.yaml):\n  " + "\n  ".join(lines)
    return etree.Comment(" " + text.replace("--", "- -") + " ")


def export_calibrated_urdf(model, nominal, source_urdf, path):
    """Write the calibrated URDF.

    Args:
        model: Calibrated RobotModel.
        nominal: The model loaded from ``source_urdf`` before calibration (same structure).
        source_urdf: URDF file the nominal model came from.
        path: Output file; written atomically.

    Returns:
        The output path.
    """
    if model.joint_names != nominal.joint_names:
        raise ValueError("calibrated and nominal models have different joints")
    root = etree.fromstring(Path(source_urdf).read_bytes(), parser=etree.XMLParser(remove_blank_text=True))
    _update_inertials(root, model, nominal)
    _update_joints(root, model, nominal)
    _add_payload(root, model)
    if _update_armatures(root, model, nominal):
        root = _with_drake_namespace(root)
    if model.has_springs:
        root.insert(0, _spring_comment(model))
    text = etree.tostring(root, pretty_print=True, xml_declaration=True, encoding="utf-8").decode()
    atomic_write_text(path, text)
    return Path(path)
