"""Box-box contact slots compiled (numba), with their tangents along one pose direction.

The narrow phase of :func:`~diffsim_ros.sim.contact.detection.box_box`, slot for slot: the
separating-axis test over the 15 axes, then either the face case (the incident face clipped
by the reference face: 24 candidates, duplicates dropped, the first 8 valid ones in order) or
one edge-edge point. Every choice (axes, faces, candidates, branches of the segment-segment
closest points) is made on the values exactly as the torch function makes it, so the slots
agree with it in order and activity; values agree to round-off.

Tangents: along one direction of the two poses (``d_rot`` (3, 3), ``d_pos`` (3,) of each box),
the derivatives of each slot's point [m], normal and gap [m], with the choices held fixed:
the derivative torch's autograd takes through the selected branch (clamps pass their
gradient on their closed interval, as ``torch.clamp``'s backward does).

3-vectors are tuples (no allocation); results go into caller-provided arrays.
"""

import math

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.vec3 import add3, cross3, dot3, scale3, sub3
from diffsim_ros.sim.contact.detection import EDGE_PREFERENCE, PARALLEL_SINE, SLOTS
from diffsim_ros.sim.contact.frames import DEGENERATE_NORM

__all__ = ["BOX_BOX_SLOTS", "box_box_slots", "boxes_separated"]

BOX_BOX_SLOTS = SLOTS[("Box", "Box")]
_USABLE_AXIS = 1e-6  # detection.box_box: shorter edge-cross axes are not tested
_TINY = float(np.finfo(np.float64).tiny)
_QUAD = ((1.0, 1.0), (-1.0, 1.0), (-1.0, -1.0), (1.0, -1.0))


@njit(cache=True)
def _col(rot, i):
    return (rot[0, i], rot[1, i], rot[2, i])


@njit(cache=True)
def _vec(v):
    return (v[0], v[1], v[2])


@njit(cache=True)
def _sign(x):
    return 1.0 if x > 0.0 else (-1.0 if x < 0.0 else 0.0)


@njit(cache=True)
def _clamp(x, dx, low, high):
    """``(clamp(x), its tangent)``: the tangent passes on ``[low, high]`` (torch.clamp's backward)."""
    if x < low:
        return low, 0.0
    if x > high:
        return high, 0.0
    return x, dx


@njit(cache=True)
def _ratio(num, d_num, den, d_den):
    """``num / den`` and its tangent."""
    value = num / den
    return value, (d_num - value * d_den) / den


@njit(cache=True)
def put3(out, row, v):
    out[row, 0], out[row, 1], out[row, 2] = v[0], v[1], v[2]


# ---------------------------------------------------------------- separating axes


@njit(cache=True)
def _projection(rot, half, axis):
    """Half-length of a box's projection on a unit axis [m]: ``sum_i |rot[:, i] · axis| h_i``."""
    return abs(dot3(_col(rot, 0), axis)) * half[0] + abs(dot3(_col(rot, 1), axis)) * half[1] + abs(dot3(_col(rot, 2), axis)) * half[2]


@njit(cache=True)
def _axis(rot_a, rot_b, index):
    """Candidate axis ``index`` of the 15 (faces of a, faces of b, edge crosses), unnormalized."""
    if index < 3:
        return _col(rot_a, index)
    if index < 6:
        return _col(rot_b, index - 3)
    return cross3(_col(rot_a, (index - 6) // 3), _col(rot_b, (index - 6) % 3))


@njit(cache=True)
def _separation(rot_a, pos_a, h_a, rot_b, pos_b, h_b, index):
    """Separation of the boxes along candidate axis ``index`` [m] (-inf for a vanishing edge cross)."""
    raw = _axis(rot_a, rot_b, index)
    length = math.sqrt(max(dot3(raw, raw), DEGENERATE_NORM**2))
    if not length > _USABLE_AXIS:
        return -math.inf
    axis = (raw[0] / length, raw[1] / length, raw[2] / length)
    d = sub3(_vec(pos_a), _vec(pos_b))
    return abs(dot3(axis, d)) - _projection(rot_a, h_a, axis) - _projection(rot_b, h_b, axis)


@njit(cache=True)
def _separations(rot_a, pos_a, h_a, rot_b, pos_b, h_b):
    """``(face_sep, face_axis, edge_sep, edge_axis)`` of the separating-axis test [m]; the axes
    are the first maxima (0-5 and 0-8), as torch.max picks them."""
    face_sep, face_axis = _separation(rot_a, pos_a, h_a, rot_b, pos_b, h_b, 0), 0
    for ax in range(1, 6):
        sep = _separation(rot_a, pos_a, h_a, rot_b, pos_b, h_b, ax)
        if sep > face_sep:
            face_sep, face_axis = sep, ax
    edge_sep, edge_axis = _separation(rot_a, pos_a, h_a, rot_b, pos_b, h_b, 6), 0
    for ax in range(7, 15):
        sep = _separation(rot_a, pos_a, h_a, rot_b, pos_b, h_b, ax)
        if sep > edge_sep:
            edge_sep, edge_axis = sep, ax - 6
    return face_sep, face_axis, edge_sep, edge_axis


@njit(cache=True)
def boxes_separated(rot_a, pos_a, h_a, rot_b, pos_b, h_b, margin):
    """:func:`~diffsim_ros.sim.contact.detection.boxes_apart` for one pair: a face axis
    separates the boxes by more than ``margin`` (+1e-9 of slack), so no slot can be active."""
    d = sub3(_vec(pos_a), _vec(pos_b))
    worst = -math.inf
    for ax in range(6):
        raw = _axis(rot_a, rot_b, ax)
        length = math.sqrt(max(dot3(raw, raw), DEGENERATE_NORM**2))
        axis = (raw[0] / length, raw[1] / length, raw[2] / length)
        worst = max(worst, abs(dot3(axis, d)) - _projection(rot_a, h_a, axis) - _projection(rot_b, h_b, axis))
    return worst > margin + 1e-9


# ---------------------------------------------------------------- face case


@njit(cache=True)
def _reference_face(rot, pos, half, axis, sign, d_rot, d_pos):
    """Reference face: ``((n, e_u, e_v, c), (dn, de_u, de_v, dc), (h_u, h_v))``: its outward normal,
    in-plane axes and centre [m] with their tangents, and its half sizes [m]."""
    u, v = (axis + 1) % 3, (axis + 2) % 3
    n, dn = scale3(_col(rot, axis), sign), scale3(_col(d_rot, axis), sign)
    c = add3(_vec(pos), scale3(n, half[axis]))
    dc = add3(_vec(d_pos), scale3(dn, half[axis]))
    return (n, _col(rot, u), _col(rot, v), c), (dn, _col(d_rot, u), _col(d_rot, v), dc), (half[u], half[v])


@njit(cache=True)
def _incident_face(rot, pos, half, n_ref, d_rot, d_pos):
    """Incident face (the other box's face most anti-parallel to ``n_ref``):
    ``((n, e1, e2, c), (dn, de1, de2, dc))`` with e1, e2 its half-edge vectors [m]."""
    k, best = 0, -1.0
    along = 0.0
    for c in range(3):
        value = dot3(_col(rot, c), n_ref)
        if abs(value) > best:
            k, best, along = c, abs(value), value
    s = -_sign(along)
    s = 1.0 if s == 0.0 else s
    k1, k2 = (k + 1) % 3, (k + 2) % 3
    n, dn = scale3(_col(rot, k), s), scale3(_col(d_rot, k), s)
    e1, de1 = scale3(_col(rot, k1), half[k1]), scale3(_col(d_rot, k1), half[k1])
    e2, de2 = scale3(_col(rot, k2), half[k2]), scale3(_col(d_rot, k2), half[k2])
    c, dc = add3(_vec(pos), scale3(n, half[k])), add3(_vec(d_pos), scale3(dn, half[k]))
    return (n, e1, e2, c), (dn, de1, de2, dc)


@njit(cache=True)
def _plane_coordinates(p, dp, ref, d_ref):
    """In-plane coordinates ``(x, y)``, height along the reference normal [m], and their tangents."""
    n, e_u, e_v, c = ref
    dn, de_u, de_v, dc = d_ref
    rel, d_rel = sub3(p, c), sub3(dp, dc)
    values = (dot3(rel, e_u), dot3(rel, e_v), dot3(rel, n))
    tangents = (dot3(d_rel, e_u) + dot3(rel, de_u), dot3(d_rel, e_v) + dot3(rel, de_v), dot3(d_rel, n) + dot3(rel, dn))
    return values, tangents


@njit(cache=True)
def _inside_polygon(poly, x, y, tol):
    """Point (x, y) in the convex quadrilateral poly (4, 2) of either orientation."""
    above, below = True, True
    for q in range(4):
        r = (q + 1) % 4
        cross = (poly[r, 0] - poly[q, 0]) * (y - poly[q, 1]) - (poly[r, 1] - poly[q, 1]) * (x - poly[q, 0])
        above = above and cross >= -tol
        below = below and cross <= tol
    return above or below


@njit(cache=True)
def _incident_candidates(inc, d_inc, ref, d_ref, sizes, points, gaps, valid, d_points, d_gaps, flat, d_flat, vertices, d_vertices):
    """Candidates 0-3: the incident face's vertices inside the reference rectangle. Fills their
    plane coordinates into flat (4, 2) / d_flat and the vertices into vertices (4, 3) / d_vertices."""
    n, e1, e2, c = inc
    dn, de1, de2, dc = d_inc
    h_u, h_v = sizes
    tol = 1e-9 * (h_u + h_v)
    for q in range(4):
        p = add3(add3(c, scale3(e1, _QUAD[q][0])), scale3(e2, _QUAD[q][1]))
        dp = add3(add3(dc, scale3(de1, _QUAD[q][0])), scale3(de2, _QUAD[q][1]))
        values, tangents = _plane_coordinates(p, dp, ref, d_ref)
        put3(points, q, p)
        put3(d_points, q, dp)
        put3(vertices, q, p)
        put3(d_vertices, q, dp)
        flat[q, 0], flat[q, 1], d_flat[q, 0], d_flat[q, 1] = values[0], values[1], tangents[0], tangents[1]
        gaps[q], d_gaps[q] = values[2], tangents[2]
        valid[q] = abs(values[0]) <= h_u + tol and abs(values[1]) <= h_v + tol


@njit(cache=True)
def _reference_candidates(inc, d_inc, ref, d_ref, sizes, flat, points, gaps, valid, d_points, d_gaps):
    """Candidates 4-7: the reference face's vertices inside the projected incident face, lifted
    onto the incident plane along the reference normal."""
    n_inc, _, _, c_inc = inc
    dn_inc, _, _, dc_inc = d_inc
    n, e_u, e_v, c = ref
    dn, de_u, de_v, dc = d_ref
    h_u, h_v = sizes
    scale = h_u + h_v
    cos = dot3(n, n_inc)
    d_cos = dot3(dn, n_inc) + dot3(n, dn_inc)
    if not abs(cos) > 1e-12:
        cos, d_cos = 1.0, 0.0
    for q in range(4):
        a, b = _QUAD[q][0] * h_u, _QUAD[q][1] * h_v
        vertex = add3(add3(c, scale3(e_u, a)), scale3(e_v, b))
        d_vertex = add3(add3(dc, scale3(de_u, a)), scale3(de_v, b))
        values, _ = _plane_coordinates(vertex, d_vertex, ref, d_ref)
        rel, d_rel = sub3(c_inc, vertex), sub3(dc_inc, d_vertex)
        lift, d_lift = _ratio(dot3(rel, n_inc), dot3(d_rel, n_inc) + dot3(rel, dn_inc), cos, d_cos)
        put3(points, 4 + q, add3(vertex, scale3(n, lift)))
        put3(d_points, 4 + q, add3(add3(d_vertex, scale3(dn, lift)), scale3(n, d_lift)))
        gaps[4 + q], d_gaps[4 + q] = lift, d_lift
        valid[4 + q] = _inside_polygon(flat, values[0], values[1], 1e-9 * scale * scale)


@njit(cache=True)
def _edge_candidates(ref, d_ref, sizes, flat, d_flat, vertices, d_vertices, points, gaps, valid, d_points, d_gaps):
    """Candidates 8-23: the incident edges crossing the sides u = ±h_u, then v = ±h_v, of the reference rectangle."""
    h_u, h_v = sizes
    scale = h_u + h_v
    tol = 1e-9 * scale
    slot = 8
    for coord in range(2):
        bound, other_bound = (h_u, h_v) if coord == 0 else (h_v, h_u)
        for side in (1.0, -1.0):
            for q in range(4):
                r = (q + 1) % 4
                delta = flat[r, coord] - flat[q, coord]
                d_delta = d_flat[r, coord] - d_flat[q, coord]
                ok = abs(delta) > 1e-12 * scale
                if not ok:
                    delta, d_delta = 1.0, 0.0
                s, ds = _ratio(side * bound - flat[q, coord], -d_flat[q, coord], delta, d_delta)
                other = flat[q, 1 - coord] + s * (flat[r, 1 - coord] - flat[q, 1 - coord])
                valid[slot] = ok and s >= 0.0 and s <= 1.0 and abs(other) <= other_bound + tol
                s, ds = _clamp(s, ds, 0.0, 1.0)
                start, d_start = _vec(vertices[q]), _vec(d_vertices[q])
                span, d_span = sub3(_vec(vertices[r]), start), sub3(_vec(d_vertices[r]), d_start)
                p = add3(start, scale3(span, s))
                dp = add3(add3(d_start, scale3(d_span, s)), scale3(span, ds))
                values, tangents = _plane_coordinates(p, dp, ref, d_ref)
                put3(points, slot, p)
                put3(d_points, slot, dp)
                gaps[slot], d_gaps[slot] = values[2], tangents[2]
                slot += 1


@njit(cache=True)
def _face_clip(ref_rot, ref_pos, ref_h, axis, sign, inc_rot, inc_pos, inc_h, margin, d_ref_rot, d_ref_pos, d_inc_rot,
               d_inc_pos, points, gaps, valid, d_points, d_gaps):
    """detection._face_clip: the 24 candidates (points on the incident surface (24, 3) [m], gaps
    along the reference normal (24,) [m], validity (24,)) and their tangents; returns the
    reference normal and its tangent."""
    ref, d_ref, sizes = _reference_face(ref_rot, ref_pos, ref_h, axis, sign, d_ref_rot, d_ref_pos)
    inc, d_inc = _incident_face(inc_rot, inc_pos, inc_h, ref[0], d_inc_rot, d_inc_pos)
    flat, d_flat = np.empty((4, 2)), np.empty((4, 2))
    vertices, d_vertices = np.empty((4, 3)), np.empty((4, 3))
    _incident_candidates(inc, d_inc, ref, d_ref, sizes, points, gaps, valid, d_points, d_gaps, flat, d_flat, vertices, d_vertices)
    _reference_candidates(inc, d_inc, ref, d_ref, sizes, flat, points, gaps, valid, d_points, d_gaps)
    _edge_candidates(ref, d_ref, sizes, flat, d_flat, vertices, d_vertices, points, gaps, valid, d_points, d_gaps)
    for i in range(24):
        valid[i] = valid[i] and gaps[i] < margin
    return ref[0], d_ref[0]


@njit(cache=True)
def _compact(points, valid, scale):
    """detection._compact: indices (8,) of the first 8 candidates that are valid and not within
    1e-7 scale of an earlier valid one, then the others in order; and their validity (8,)."""
    count = points.shape[0]
    kept = np.empty(count, dtype=np.bool_)
    for i in range(count):
        kept[i] = valid[i]
        for j in range(i):
            if not kept[i]:
                break
            if valid[j]:
                dx, dy, dz = points[i, 0] - points[j, 0], points[i, 1] - points[j, 1], points[i, 2] - points[j, 2]
                if math.sqrt(dx * dx + dy * dy + dz * dz) <= 1e-7 * scale:
                    kept[i] = False
    order = np.empty(BOX_BOX_SLOTS, dtype=np.int64)
    flags = np.zeros(BOX_BOX_SLOTS, dtype=np.bool_)
    slot = 0
    for want in (True, False):
        for i in range(count):
            if kept[i] == want and slot < BOX_BOX_SLOTS:
                order[slot], flags[slot] = i, want
                slot += 1
    return order, flags


# ---------------------------------------------------------------- edge-edge case


@njit(cache=True)
def _segment_segment(p1, d1, p2, d2, dp1, dd1, dp2, dd2):
    """detection._segment_segment with tangents: ``(s, t, ds, dt)`` of the closest points of the
    segments p1 + s d1 and p2 + t d2 (its branches and clamps, on the values)."""
    r, dr = sub3(p1, p2), sub3(dp1, dp2)
    a, da = dot3(d1, d1), 2.0 * dot3(d1, dd1)
    e, de = dot3(d2, d2), 2.0 * dot3(d2, dd2)
    f, df = dot3(d2, r), dot3(dd2, r) + dot3(d2, dr)
    c, dc = dot3(d1, r), dot3(dd1, r) + dot3(d1, dr)
    b, db = dot3(d1, d2), dot3(dd1, d2) + dot3(d1, dd2)
    denom = a * e - b * b
    if denom <= (PARALLEL_SINE**2) * a * e + _TINY:
        s, ds = 0.0, 0.0
    else:
        s, ds = _ratio(b * f - c * e, db * f + b * df - dc * e - c * de, denom, da * e + a * de - 2.0 * b * db)
    s, ds = _clamp(s, ds, 0.0, 1.0)
    e_c, de_c = (e, de) if e >= _TINY else (_TINY, 0.0)
    a_c, da_c = (a, da) if a >= _TINY else (_TINY, 0.0)
    t, dt = _ratio(b * s + f, db * s + b * ds + df, e_c, de_c)
    if t < 0.0:
        s, ds = _ratio(-c, -dc, a_c, da_c)
        s, ds = _clamp(s, ds, 0.0, 1.0)
    elif t > 1.0:
        s, ds = _ratio(b - c, db - dc, a_c, da_c)
        s, ds = _clamp(s, ds, 0.0, 1.0)
    t, dt = _clamp(t, dt, 0.0, 1.0)
    return s, t, ds, dt


@njit(cache=True)
def _supporting_edge(rot, pos, half, index, direction, d_rot, d_pos):
    """Edge ``index`` of a box farthest along ``direction``: ``(start, span, d_start, d_span)`` [m]."""
    centre, d_centre = _vec(pos), _vec(d_pos)
    for i in range(3):
        if i != index:
            side = _sign(dot3(_col(rot, i), direction)) * half[i]
            centre = add3(centre, scale3(_col(rot, i), side))
            d_centre = add3(d_centre, scale3(_col(d_rot, i), side))
    along, d_along = scale3(_col(rot, index), half[index]), scale3(_col(d_rot, index), half[index])
    return sub3(centre, along), scale3(along, 2.0), sub3(d_centre, d_along), scale3(d_along, 2.0)


@njit(cache=True)
def _edge_contact(rot_a, pos_a, h_a, rot_b, pos_b, h_b, edge, d_rot_a, d_pos_a, d_rot_b, d_pos_b):
    """The edge-edge contact: ``(point, normal (b -> a), gap, d_point, d_normal, d_gap)``."""
    i, j = edge // 3, edge % 3
    raw = cross3(_col(rot_a, i), _col(rot_b, j))
    d_raw = add3(cross3(_col(d_rot_a, i), _col(rot_b, j)), cross3(_col(rot_a, i), _col(d_rot_b, j)))
    norm = math.sqrt(max(dot3(raw, raw), DEGENERATE_NORM**2))
    if norm <= DEGENERATE_NORM:
        axis, d_axis = (0.0, 0.0, 1.0), (0.0, 0.0, 0.0)
    else:
        axis = (raw[0] / norm, raw[1] / norm, raw[2] / norm)
        d_axis = scale3(sub3(d_raw, scale3(axis, dot3(axis, d_raw))), 1.0 / norm)
    if dot3(axis, sub3(_vec(pos_a), _vec(pos_b))) < 0.0:
        axis, d_axis = scale3(axis, -1.0), scale3(d_axis, -1.0)
    p1, d1, dp1, dd1 = _supporting_edge(rot_a, pos_a, h_a, i, scale3(axis, -1.0), d_rot_a, d_pos_a)
    p2, d2, dp2, dd2 = _supporting_edge(rot_b, pos_b, h_b, j, axis, d_rot_b, d_pos_b)
    s, t, ds, dt = _segment_segment(p1, d1, p2, d2, dp1, dd1, dp2, dd2)
    on_a, d_on_a = add3(p1, scale3(d1, s)), add3(add3(dp1, scale3(dd1, s)), scale3(d1, ds))
    on_b, d_on_b = add3(p2, scale3(d2, t)), add3(add3(dp2, scale3(dd2, t)), scale3(d2, dt))
    rel, d_rel = sub3(on_a, on_b), sub3(d_on_a, d_on_b)
    gap, d_gap = dot3(rel, axis), dot3(d_rel, axis) + dot3(rel, d_axis)
    return scale3(add3(on_a, on_b), 0.5), axis, gap, scale3(add3(d_on_a, d_on_b), 0.5), d_axis, d_gap


# ---------------------------------------------------------------- the pair


@njit(cache=True)
def _face_slots(rot_a, pos_a, h_a, rot_b, pos_b, h_b, margin, face_axis, tangents, point, gap, valid, d_point, d_gap):
    """The face case into point (8, 3), gap (8,), valid (8,) and tangents; returns the normal (b -> a) and its tangent."""
    d_rot_a, d_pos_a, d_rot_b, d_pos_b = tangents
    d = sub3(_vec(pos_a), _vec(pos_b))
    points, d_points = np.empty((24, 3)), np.empty((24, 3))
    gaps, d_gaps, flags = np.empty(24), np.empty(24), np.empty(24, dtype=np.bool_)
    if face_axis >= 3:
        sign = _sign(dot3(_col(rot_b, face_axis - 3), d))
        n_ref, dn_ref = _face_clip(rot_b, pos_b, h_b, face_axis - 3, 1.0 if sign == 0.0 else sign, rot_a, pos_a, h_a,
                                   margin, d_rot_b, d_pos_b, d_rot_a, d_pos_a, points, gaps, flags, d_points, d_gaps)
        normal, d_normal = n_ref, dn_ref
    else:
        sign = -_sign(dot3(_col(rot_a, face_axis), d))
        n_ref, dn_ref = _face_clip(rot_a, pos_a, h_a, face_axis, -1.0 if sign == 0.0 else sign, rot_b, pos_b, h_b,
                                   margin, d_rot_a, d_pos_a, d_rot_b, d_pos_b, points, gaps, flags, d_points, d_gaps)
        normal, d_normal = scale3(n_ref, -1.0), scale3(dn_ref, -1.0)
    order, picked = _compact(points, flags, h_a[0] + h_a[1] + h_a[2] + h_b[0] + h_b[1] + h_b[2])
    for slot in range(BOX_BOX_SLOTS):
        o = order[slot]
        gap[slot], d_gap[slot], valid[slot] = gaps[o], d_gaps[o], picked[slot]
        put3(point, slot, sub3(_vec(points[o]), scale3(n_ref, 0.5 * gaps[o])))
        shift = add3(scale3(dn_ref, 0.5 * gaps[o]), scale3(n_ref, 0.5 * d_gaps[o]))
        put3(d_point, slot, sub3(_vec(d_points[o]), shift))
    return normal, d_normal


@njit(cache=True)
def box_box_slots(rot_a, pos_a, h_a, rot_b, pos_b, h_b, margin, tangents, point, normal, gap, active, d_point, d_normal, d_gap):
    """The 8 contact slots of two boxes (detection.box_box) and their tangents, into the given arrays.

    Args:
        rot_a, rot_b: Box rotations (3, 3). pos_a, pos_b: centres [m] (3,). h_a, h_b: half extents [m] (3,).
        margin: Slots with a gap below this are active [m].
        tangents: ``(d_rot_a (3, 3), d_pos_a (3,), d_rot_b, d_pos_b)``: the pose direction (zeros for values only).
        point, normal: (8, 3) out: contact points [m], unit normals from b to a.
        gap, active: (8,) out: signed distances [m], activity.
        d_point, d_normal, d_gap: out: the tangents of point, normal and gap along the direction.
    """
    face_sep, face_axis, edge_sep, edge_axis = _separations(rot_a, pos_a, h_a, rot_b, pos_b, h_b)
    size = min(min(h_a[0], h_a[1], h_a[2]), min(h_b[0], h_b[1], h_b[2]))
    use_edge = edge_sep > face_sep + EDGE_PREFERENCE * size
    reach = max(face_sep, edge_sep) < margin
    face_normal, d_face_normal = _face_slots(rot_a, pos_a, h_a, rot_b, pos_b, h_b, margin, face_axis, tangents, point,
                                             gap, active, d_point, d_gap)
    for slot in range(BOX_BOX_SLOTS):
        active[slot] = active[slot] and reach and not use_edge
        put3(normal, slot, face_normal)
        put3(d_normal, slot, d_face_normal)
    if use_edge:
        d_rot_a, d_pos_a, d_rot_b, d_pos_b = tangents
        p, n, g, dp, dn, dg = _edge_contact(rot_a, pos_a, h_a, rot_b, pos_b, h_b, edge_axis, d_rot_a, d_pos_a, d_rot_b, d_pos_b)
        put3(point, 0, p)
        put3(d_point, 0, dp)
        gap[0], d_gap[0], active[0] = g, dg, g < margin and reach
        for slot in range(BOX_BOX_SLOTS):
            put3(normal, slot, n)
            put3(d_normal, slot, dn)
