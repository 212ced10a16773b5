"""Narrow-phase collision detection with a fixed number of contact slots per shape pair.

Every pair function returns a :class:`Contacts` whose slot count depends only on the shape
types, so contacts batch and warm-start by slot (slot k of a box-plane pair is always corner
k). Inactive slots (farther than ``margin``) still carry finite values. Everything is written
in differentiable torch ops, so points, normals and gaps have exact gradients with respect to
the poses (for spheres and capsules the normal is the normalized centre/segment difference,
the analytic normal gradient of Nimble's Appendix C); the mode (which corner, which SAT axis)
is piecewise constant.

Convention: ``normal`` points from shape b to shape a (moving a along it separates them);
``gap`` is the signed distance [m] (negative = penetration); ``point`` is the midpoint of the
two surface points.
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.frames import safe_norm, safe_normalize, transform_points
from diffsim_ros.sim.contact.shapes import Box, Capsule, Plane, Sphere

__all__ = ["Contacts", "SLOTS", "collide", "slot_count", "concat_contacts", "boxes_apart"]

# Slots per unordered shape pair.
SLOTS = {
    ("Sphere", "Plane"): 1,
    ("Capsule", "Plane"): 2,
    ("Box", "Plane"): 8,
    ("Sphere", "Sphere"): 1,
    ("Capsule", "Sphere"): 1,
    ("Capsule", "Capsule"): 2,
    ("Box", "Sphere"): 1,
    ("Box", "Capsule"): 3,
    ("Box", "Box"): 8,
}
# Order in which a pair is canonicalized (the first shape is 'a').
_RANK = {"Box": 0, "Capsule": 1, "Sphere": 2, "Plane": 3}
# Segments whose directions' sine is below this are treated as parallel (two capsule contacts).
PARALLEL_SINE = 1e-3
# Golden-section steps of the box-capsule search (bracket shrinks by 0.618 per step).
GOLDEN_SECTION_STEPS = 40
# An edge-edge SAT axis must beat the best face axis by this fraction of the smallest box size.
EDGE_PREFERENCE = 1e-3


@dataclass(frozen=True)
class Contacts:
    """Contact slots of one or more shape pairs (leading batch shape ``...``).

    Attributes:
        point: Contact points in the world [m], shape (..., K, 3).
        normal: Unit normals from shape b to shape a, shape (..., K, 3).
        gap: Signed distances [m], shape (..., K).
        active: Slots closer than the margin, bool (..., K).
        degenerate: Normals from a fallback direction (coincident centres, zero-length
            segments seen end-on), bool (..., K).
    """

    point: torch.Tensor
    normal: torch.Tensor
    gap: torch.Tensor
    active: torch.Tensor
    degenerate: torch.Tensor

    @property
    def count(self):
        return self.gap.shape[-1]

    def flipped(self):
        """The same contacts seen from the other shape (normals reversed)."""
        return Contacts(self.point, -self.normal, self.gap, self.active, self.degenerate)


def concat_contacts(parts):
    """Concatenate the slots of several :class:`Contacts` (broadcasting their batch shapes)."""
    batch = torch.broadcast_shapes(*(p.gap.shape[:-1] for p in parts))

    def cat(name, tail):
        return torch.cat([getattr(p, name).expand(*batch, p.count, *tail) for p in parts], -len(tail) - 1)

    return Contacts(cat("point", (3,)), cat("normal", (3,)), cat("gap", ()), cat("active", ()), cat("degenerate", ()))


def slot_count(shape_a, shape_b):
    """Number of contact slots of a shape pair (raises for unsupported pairs)."""
    key = tuple(sorted((type(shape_a).__name__, type(shape_b).__name__), key=_RANK.get))
    if key not in SLOTS:
        raise ContactError(f"no collision function for {key[0]} vs {key[1]}")
    return SLOTS[key]


def _z_axis(like):
    out = torch.zeros_like(like)
    out[..., 2] = 1.0
    return out


def _make(point, normal, gap, margin, degenerate=None):
    if degenerate is None:
        degenerate = torch.zeros_like(gap, dtype=torch.bool)
    return Contacts(point, normal, gap, gap < margin, degenerate)


# ---------------------------------------------------------------------------- primitives
def _spheres(center_a, radius_a, center_b, radius_b, fallback):
    """Sphere-sphere contact data (..., 3)/(...): point, normal (b -> a), gap, degenerate."""
    normal, degenerate = safe_normalize(center_a - center_b, fallback)
    dist = (normal * (center_a - center_b)).sum(-1)
    gap = dist - radius_a - radius_b
    surface_a = center_a - radius_a * normal
    surface_b = center_b + radius_b * normal
    return 0.5 * (surface_a + surface_b), normal, gap, degenerate


def _closest_on_segment(start, direction, point):
    """Parameter t in [0, 1] of the point of ``start + t direction`` closest to ``point``."""
    length_sq = (direction * direction).sum(-1).clamp_min(torch.finfo(direction.dtype).tiny)
    return (((point - start) * direction).sum(-1) / length_sq).clamp(0.0, 1.0)


def _capsule_segment(shape, rot, pos):
    """Start point and direction vector of a capsule's core segment in the world, (..., 3) each."""
    axis = rot[..., :, 2] * shape.half_length
    return pos - axis, 2.0 * axis


def _segment_segment(p1, d1, p2, d2):
    """Closest-point parameters (s, t) of segments p1 + s d1 and p2 + t d2 (Ericson §5.1.9)."""
    tiny = torch.finfo(p1.dtype).tiny
    r = p1 - p2
    a = (d1 * d1).sum(-1)
    e = (d2 * d2).sum(-1)
    f = (d2 * r).sum(-1)
    c = (d1 * r).sum(-1)
    b = (d1 * d2).sum(-1)
    denom = a * e - b * b
    parallel = denom <= (PARALLEL_SINE**2) * a * e + tiny
    s = torch.where(parallel, torch.zeros_like(a), ((b * f - c * e) / torch.where(parallel, torch.ones_like(denom), denom)))
    s = s.clamp(0.0, 1.0)
    t = (b * s + f) / e.clamp_min(tiny)
    s_low = (-c / a.clamp_min(tiny)).clamp(0.0, 1.0)
    s_high = ((b - c) / a.clamp_min(tiny)).clamp(0.0, 1.0)
    s = torch.where(t < 0.0, s_low, torch.where(t > 1.0, s_high, s))
    t = t.clamp(0.0, 1.0)
    return s, t, parallel


# ---------------------------------------------------------------------------- plane pairs
def _points_plane(points, radius, plane_rot, plane_pos, margin):
    """Spheres of ``radius`` at ``points`` (..., k, 3) against a plane (..., 3, 3)/(..., 3)."""
    normal = plane_rot[..., None, :, 2].expand_as(points)
    dist = ((points - plane_pos[..., None, :]) * normal).sum(-1)
    gap = dist - radius
    point = points - normal * (radius + 0.5 * gap)[..., None]
    return _make(point, normal, gap, margin)


def sphere_plane(sphere, rot_a, pos_a, plane, rot_b, pos_b, margin):
    return _points_plane(pos_a[..., None, :], sphere.radius, rot_b, pos_b, margin)


def capsule_plane(capsule, rot_a, pos_a, plane, rot_b, pos_b, margin):
    start, direction = _capsule_segment(capsule, rot_a, pos_a)
    ends = torch.stack([start, start + direction], -2)
    return _points_plane(ends, capsule.radius, rot_b, pos_b, margin)


def _box_corners(box, rot, pos):
    """World corners of a box, shape (..., 8, 3), ordered by the sign bits of (x, y, z)."""
    h = torch.tensor(box.half_extents, dtype=pos.dtype, device=pos.device)
    signs = torch.tensor(
        [[sx, sy, sz] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0) for sz in (-1.0, 1.0)], dtype=pos.dtype, device=pos.device
    )
    return transform_points(rot, pos, signs * h)


def box_plane(box, rot_a, pos_a, plane, rot_b, pos_b, margin):
    return _points_plane(_box_corners(box, rot_a, pos_a), 0.0, rot_b, pos_b, margin)


# ---------------------------------------------------------------------------- round pairs
def sphere_sphere(sphere_a, rot_a, pos_a, sphere_b, rot_b, pos_b, margin):
    point, normal, gap, degenerate = _spheres(pos_a, sphere_a.radius, pos_b, sphere_b.radius, _z_axis(pos_a))
    return _make(point[..., None, :], normal[..., None, :], gap[..., None], margin, degenerate[..., None])


def capsule_sphere(capsule, rot_a, pos_a, sphere, rot_b, pos_b, margin):
    start, direction = _capsule_segment(capsule, rot_a, pos_a)
    t = _closest_on_segment(start, direction, pos_b)
    core = start + t[..., None] * direction
    point, normal, gap, degenerate = _spheres(core, capsule.radius, pos_b, sphere.radius, _z_axis(pos_a))
    return _make(point[..., None, :], normal[..., None, :], gap[..., None], margin, degenerate[..., None])


def capsule_capsule(cap_a, rot_a, pos_a, cap_b, rot_b, pos_b, margin):
    """Two slots: the closest points, and for (nearly) parallel cores the other end of their overlap."""
    p1, d1 = _capsule_segment(cap_a, rot_a, pos_a)
    p2, d2 = _capsule_segment(cap_b, rot_b, pos_b)
    s, t, parallel = _segment_segment(p1, d1, p2, d2)
    # Overlap interval of the parallel cores, in a's parameter.
    t_start = _closest_on_segment(p1, d1, p2)
    t_end = _closest_on_segment(p1, d1, p2 + d2)
    low, high = torch.minimum(t_start, t_end), torch.maximum(t_start, t_end)
    s0 = torch.where(parallel, low, s)
    s1 = high
    core_a = torch.stack([p1 + s0[..., None] * d1, p1 + s1[..., None] * d1], -2)
    t0 = torch.where(parallel, _closest_on_segment(p2, d2, core_a[..., 0, :]), t)
    t1 = _closest_on_segment(p2, d2, core_a[..., 1, :])
    core_b = torch.stack([p2 + t0[..., None] * d2, p2 + t1[..., None] * d2], -2)
    point, normal, gap, degenerate = _spheres(core_a, cap_a.radius, core_b, cap_b.radius, _z_axis(core_a))
    length = safe_norm(d1)
    distinct = parallel & ((high - low) * length > 1e-9 * (1.0 + length))
    second = torch.stack([torch.ones_like(distinct), distinct], -1)
    contacts = _make(point, normal, gap, margin, degenerate)
    return Contacts(point, normal, gap, contacts.active & second, degenerate)


def _box_point(box, rot, pos, point):
    """Closest point on a box's surface to ``point`` (..., k, 3), its outward normal and signed distance."""
    h = torch.tensor(box.half_extents, dtype=pos.dtype, device=pos.device)
    local = matvec(rot.transpose(-1, -2)[..., None, :, :], point - pos[..., None, :])
    clamped = torch.maximum(torch.minimum(local, h), -h)
    inside = (local.abs() <= h).all(-1)
    # Inside: push out through the face of least depth.
    depth = h - local.abs()
    face = depth.argmin(-1, keepdim=True)
    sign = torch.where(torch.gather(local, -1, face) >= 0, 1.0, -1.0).to(pos.dtype)
    face_value = sign * torch.gather(h.expand_as(local), -1, face)
    projected = local.scatter(-1, face, face_value)
    face_normal = torch.zeros_like(local).scatter(-1, face, sign)
    surface = torch.where(inside[..., None], projected, clamped)
    outward_local, _ = safe_normalize(local - clamped, face_normal)
    outward_local = torch.where(inside[..., None], face_normal, outward_local)
    distance = torch.where(inside, -torch.gather(depth, -1, face)[..., 0], safe_norm(local - clamped))
    world = transform_points(rot, pos, surface)
    return world, matvec(rot[..., None, :, :], outward_local), distance


def _box_spheres(box, rot_a, pos_a, centers, radius, margin):
    """Spheres at ``centers`` (..., k, 3) against a box (a): normals from the spheres to the box."""
    surface, outward, distance = _box_point(box, rot_a, pos_a, centers)
    normal = -outward
    gap = distance - radius
    point = 0.5 * (surface + centers + radius * normal)
    return _make(point, normal, gap, margin)


def box_sphere(box, rot_a, pos_a, sphere, rot_b, pos_b, margin):
    return _box_spheres(box, rot_a, pos_a, pos_b[..., None, :], sphere.radius, margin)


def _deepest_on_segment(box, rot, pos, start, direction):
    """Parameter t in [0, 1] minimizing the box's signed distance along a segment (golden section).

    The signed distance to a convex set is convex, so the search is exact up to its bracket;
    at an interior optimum the gap's derivative in t vanishes, so a detached t keeps the
    pose gradients exact.
    """
    with torch.no_grad():
        ratio = 0.5 * (5.0**0.5 - 1.0)
        low, high = torch.zeros_like(start[..., 0]), torch.ones_like(start[..., 0])

        def distance(t):
            return _box_point(box, rot.detach(), pos.detach(), (start + t[..., None] * direction)[..., None, :])[2][..., 0]

        for _ in range(GOLDEN_SECTION_STEPS):
            left, right = high - ratio * (high - low), low + ratio * (high - low)
            go_left = distance(left) < distance(right)
            high = torch.where(go_left, right, high)
            low = torch.where(go_left, low, left)
        return 0.5 * (low + high)


def box_capsule(box, rot_a, pos_a, capsule, rot_b, pos_b, margin):
    """Three slots: the two end spheres, and the core point closest to the box when it lies between them."""
    start, direction = _capsule_segment(capsule, rot_b, pos_b)
    t = _deepest_on_segment(box, rot_a, pos_a, start.detach(), direction.detach())
    centers = torch.stack([start, start + direction, start + t[..., None] * direction], -2)
    contacts = _box_spheres(box, rot_a, pos_a, centers, capsule.radius, margin)
    # The middle slot only counts where it is strictly closer than both ends (a crossing edge).
    ends_gap = torch.minimum(contacts.gap[..., 0], contacts.gap[..., 1])
    tol = 1e-9 * (1.0 + capsule.half_length)
    middle = (contacts.gap[..., 2] < ends_gap - tol) & (t > 1e-6) & (t < 1.0 - 1e-6)
    keep = torch.stack([torch.ones_like(middle), torch.ones_like(middle), middle], -1)
    return Contacts(contacts.point, contacts.normal, contacts.gap, contacts.active & keep, contacts.degenerate)


# ---------------------------------------------------------------------------- box-box
def _gather_column(rot, index):
    """Column ``index`` (...) of rot (..., 3, 3) -> (..., 3)."""
    idx = index[..., None, None].expand(*rot.shape[:-2], 3, 1)
    return torch.gather(rot, -1, idx)[..., 0]


def _gather_value(values, index):
    return torch.gather(values.expand(*index.shape, 3), -1, index[..., None])[..., 0]


def _inside_polygon(poly, point, tol):
    """Point (..., p, 2) in convex polygon (..., 4, 2) with either orientation, bool (..., p)."""
    edges = torch.roll(poly, -1, -2) - poly
    rel = point[..., :, None, :] - poly[..., None, :, :]
    cross = edges[..., None, :, 0] * rel[..., 1] - edges[..., None, :, 1] * rel[..., 0]
    return (cross >= -tol[..., None, None]).all(-1) | (cross <= tol[..., None, None]).all(-1)


def _face_clip(ref_rot, ref_pos, ref_h, axis, sign, inc_rot, inc_pos, inc_h, margin):
    """Face-face contacts: the incident face clipped by the reference face (24 candidates).

    Returns points on the incident surface (..., 24, 3), gaps along the reference normal
    (..., 24), validity (..., 24) and the reference normal (..., 3).
    """
    dtype = ref_pos.dtype
    n_ref = sign[..., None] * _gather_column(ref_rot, axis)
    u_axis, v_axis = (axis + 1) % 3, (axis + 2) % 3
    e_u, e_v = _gather_column(ref_rot, u_axis), _gather_column(ref_rot, v_axis)
    hu, hv = _gather_value(ref_h, u_axis), _gather_value(ref_h, v_axis)
    c_ref = ref_pos + n_ref * _gather_value(ref_h, axis)[..., None]
    # Incident face: the face of the other box most anti-parallel to the reference normal.
    dots = matvec(inc_rot.transpose(-1, -2), n_ref)
    k = dots.abs().argmax(-1)
    s_inc = -torch.sign(torch.gather(dots, -1, k[..., None])[..., 0])
    s_inc = torch.where(s_inc == 0, torch.ones_like(s_inc), s_inc)
    n_inc = s_inc[..., None] * _gather_column(inc_rot, k)
    k1, k2 = (k + 1) % 3, (k + 2) % 3
    e1 = _gather_column(inc_rot, k1) * _gather_value(inc_h, k1)[..., None]
    e2 = _gather_column(inc_rot, k2) * _gather_value(inc_h, k2)[..., None]
    c_inc = inc_pos + n_inc * _gather_value(inc_h, k)[..., None]
    quad_signs = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]], dtype=dtype, device=ref_pos.device)
    inc_vertices = c_inc[..., None, :] + quad_signs[:, :1] * e1[..., None, :] + quad_signs[:, 1:] * e2[..., None, :]

    def to_2d(points):
        rel = points - c_ref[..., None, :]
        return torch.stack([(rel * e_u[..., None, :]).sum(-1), (rel * e_v[..., None, :]).sum(-1)], -1)

    def height(points):
        return ((points - c_ref[..., None, :]) * n_ref[..., None, :]).sum(-1)

    scale = (hu + hv)
    tol = 1e-9 * scale
    inc_2d = to_2d(inc_vertices)
    # (a) incident vertices inside the reference rectangle.
    inside_a = (inc_2d[..., 0].abs() <= hu[..., None] + tol[..., None]) & (inc_2d[..., 1].abs() <= hv[..., None] + tol[..., None])
    # (b) reference vertices inside the projected incident face, lifted onto the incident plane.
    ref_vertices = c_ref[..., None, :] + quad_signs[:, :1] * (hu[..., None] * e_u)[..., None, :] + quad_signs[:, 1:] * (hv[..., None] * e_v)[..., None, :]
    ref_2d = to_2d(ref_vertices)
    inside_b = _inside_polygon(inc_2d, ref_2d, tol * scale)
    cos = (n_ref * n_inc).sum(-1)
    lift = ((c_inc[..., None, :] - ref_vertices) * n_inc[..., None, :]).sum(-1) / torch.where(cos.abs() > 1e-12, cos, torch.ones_like(cos))[..., None]
    points_b = ref_vertices + lift[..., None] * n_ref[..., None, :]
    # (c) incident edges crossing the reference rectangle's sides u = ±hu, v = ±hv.
    start2, end2 = inc_2d, torch.roll(inc_2d, -1, -2)
    start3, end3 = inc_vertices, torch.roll(inc_vertices, -1, -2)
    points_c, valid_c = [], []
    for coord, bound, other_bound in ((0, hu, hv), (1, hv, hu)):
        for side in (1.0, -1.0):
            delta = end2[..., coord] - start2[..., coord]
            ok_delta = delta.abs() > 1e-12 * scale[..., None]
            s = (side * bound[..., None] - start2[..., coord]) / torch.where(ok_delta, delta, torch.ones_like(delta))
            other = start2[..., 1 - coord] + s * (end2[..., 1 - coord] - start2[..., 1 - coord])
            valid_c.append(ok_delta & (s >= 0.0) & (s <= 1.0) & (other.abs() <= other_bound[..., None] + tol[..., None]))
            points_c.append(start3 + s[..., None].clamp(0.0, 1.0) * (end3 - start3))
    points = torch.cat([inc_vertices, points_b] + points_c, -2)
    valid = torch.cat([inside_a, inside_b] + valid_c, -1)
    gaps = torch.cat([height(inc_vertices), lift, height(torch.cat(points_c, -2))], -1)
    return points, gaps, valid & (gaps < margin), n_ref


def _compact(points, gaps, valid, normal, slots, scale):
    """Drop duplicate candidates and keep the first ``slots`` valid ones (stable order)."""
    dist = torch.linalg.vector_norm(points[..., :, None, :] - points[..., None, :, :], dim=-1).detach()
    count = points.shape[-2]
    earlier = torch.ones(count, count, dtype=torch.bool, device=points.device).tril(-1)
    close = (dist <= 1e-7 * scale[..., None, None]) & earlier & valid[..., None, :]
    valid = valid & ~close.any(-1)
    order = torch.argsort((~valid).to(torch.int64) * count + torch.arange(count, device=points.device), dim=-1)[..., :slots]
    pick = torch.gather(points, -2, order[..., None].expand(*order.shape, 3))
    return pick, torch.gather(gaps, -1, order), torch.gather(valid, -1, order)


def box_box(box_a, rot_a, pos_a, box_b, rot_b, pos_b, margin):
    """Separating-axis test over the 15 axes, then face clipping (up to 8 points) or one edge-edge point."""
    dtype, device = pos_a.dtype, pos_a.device
    h_a = torch.tensor(box_a.half_extents, dtype=dtype, device=device)
    h_b = torch.tensor(box_b.half_extents, dtype=dtype, device=device)
    d = pos_a - pos_b
    cols_a, cols_b = rot_a.transpose(-1, -2), rot_b.transpose(-1, -2)  # rows = box axes (..., 3, 3)
    edge_axes = torch.cross(cols_a[..., :, None, :].expand(*cols_a.shape[:-2], 3, 3, 3),
                            cols_b[..., None, :, :].expand(*cols_b.shape[:-2], 3, 3, 3), dim=-1).reshape(*cols_a.shape[:-2], 9, 3)
    axes = torch.cat([cols_a, cols_b, edge_axes], -2)  # (..., 15, 3)
    length = safe_norm(axes)
    usable = length > 1e-6
    axes = axes / torch.where(usable, length, torch.ones_like(length))[..., None]
    proj_a = (matvec(cols_a[..., None, :, :], axes).abs() * h_a).sum(-1)
    proj_b = (matvec(cols_b[..., None, :, :], axes).abs() * h_b).sum(-1)
    separation = (axes * d[..., None, :]).sum(-1).abs() - proj_a - proj_b
    separation = torch.where(usable, separation, torch.full_like(separation, -torch.inf))
    face_sep, face_axis = separation[..., :6].max(-1)
    edge_sep, edge_axis = separation[..., 6:].max(-1)
    size = min(min(box_a.half_extents), min(box_b.half_extents))
    use_edge = edge_sep > face_sep + EDGE_PREFERENCE * size
    scale = torch.full_like(face_sep, sum(box_a.half_extents) + sum(box_b.half_extents))
    # Face case, computed with each box as the reference and selected per batch element.
    axis_b = (face_axis - 3).clamp(0, 2)
    axis_a = face_axis.clamp(0, 2)
    sign_b = torch.sign((_gather_column(rot_b, axis_b) * d).sum(-1))
    sign_b = torch.where(sign_b == 0, torch.ones_like(sign_b), sign_b)
    sign_a = -torch.sign((_gather_column(rot_a, axis_a) * d).sum(-1))
    sign_a = torch.where(sign_a == 0, -torch.ones_like(sign_a), sign_a)
    pts_b, gaps_b, valid_b, n_b = _face_clip(rot_b, pos_b, h_b, axis_b, sign_b, rot_a, pos_a, h_a, margin)
    pts_a, gaps_a, valid_a, n_a = _face_clip(rot_a, pos_a, h_a, axis_a, sign_a, rot_b, pos_b, h_b, margin)
    ref_is_b = (face_axis >= 3)[..., None]
    points = torch.where(ref_is_b[..., None], pts_b, pts_a)
    gaps = torch.where(ref_is_b, gaps_b, gaps_a)
    valid = torch.where(ref_is_b, valid_b, valid_a)
    n_ref = torch.where(ref_is_b, n_b, n_a)
    normal_face = torch.where(ref_is_b, n_b, -n_a)  # from b to a
    pick, pick_gap, pick_valid = _compact(points, gaps, valid, n_ref, 8, scale)
    point_face = pick - 0.5 * pick_gap[..., None] * n_ref[..., None, :]
    # Edge-edge case: one contact between the two supporting edges.
    i, j = (edge_axis // 3), (edge_axis % 3)
    axis = torch.gather(edge_axes, -2, edge_axis[..., None, None].expand(*edge_axis.shape, 1, 3))[..., 0, :]
    axis, _ = safe_normalize(axis, _z_axis(axis))
    axis = torch.where(((axis * d).sum(-1) < 0)[..., None], -axis, axis)  # from b to a
    sign_sa = -torch.sign(matvec(cols_a, axis))
    sign_sb = torch.sign(matvec(cols_b, axis))
    mask_i = torch.nn.functional.one_hot(i, 3).to(dtype)
    mask_j = torch.nn.functional.one_hot(j, 3).to(dtype)
    center_a = pos_a + matvec(rot_a, sign_sa * h_a * (1.0 - mask_i))
    center_b = pos_b + matvec(rot_b, sign_sb * h_b * (1.0 - mask_j))
    dir_a = _gather_column(rot_a, i) * _gather_value(h_a, i)[..., None]
    dir_b = _gather_column(rot_b, j) * _gather_value(h_b, j)[..., None]
    s, t, _ = _segment_segment(center_a - dir_a, 2.0 * dir_a, center_b - dir_b, 2.0 * dir_b)
    on_a = center_a - dir_a + 2.0 * s[..., None] * dir_a
    on_b = center_b - dir_b + 2.0 * t[..., None] * dir_b
    gap_edge = ((on_a - on_b) * axis).sum(-1)
    point_edge = 0.5 * (on_a + on_b)
    slot0 = torch.zeros(8, dtype=torch.bool, device=device)
    slot0[0] = True
    edge_point = torch.where(slot0[:, None], point_edge[..., None, :], point_face)
    edge_valid = slot0 & (gap_edge < margin)[..., None]
    use = use_edge[..., None]
    point = torch.where(use[..., None], edge_point, point_face)
    normal = torch.where(use, axis, normal_face)[..., None, :].expand_as(point)
    gap = torch.where(use, torch.where(slot0, gap_edge[..., None], pick_gap), pick_gap)
    active = torch.where(use, edge_valid, pick_valid) & (torch.maximum(face_sep, edge_sep) < margin)[..., None]
    return Contacts(point, normal, gap, active, torch.zeros_like(active))


def boxes_apart(box_a, rot_a, pos_a, box_b, rot_b, pos_b, margin):
    """Whether :func:`box_box` can mark no slot active anywhere in the batch: one of the six
    face axes separates the boxes by more than ``margin`` (its activity test needs every
    separating-axis distance below the margin). Cheap (no clipping), no gradient."""
    with torch.no_grad():
        h_a = torch.tensor(box_a.half_extents, dtype=pos_a.dtype, device=pos_a.device)
        h_b = torch.tensor(box_b.half_extents, dtype=pos_a.dtype, device=pos_a.device)
        cols_a, cols_b = rot_a.transpose(-1, -2), rot_b.transpose(-1, -2)
        axes = torch.cat(torch.broadcast_tensors(cols_a, cols_b), -2)
        axes = axes / safe_norm(axes)[..., None]
        proj_a = (matvec(cols_a[..., None, :, :], axes).abs() * h_a).sum(-1)
        proj_b = (matvec(cols_b[..., None, :, :], axes).abs() * h_b).sum(-1)
        separation = (axes * (pos_a - pos_b)[..., None, :]).sum(-1).abs() - proj_a - proj_b
        # The slack keeps round-off (box_box normalizes all 15 axes together) from deciding.
        return bool((separation.amax(-1) > margin + 1e-9).all())


_PAIRS = {
    ("Sphere", "Plane"): sphere_plane,
    ("Capsule", "Plane"): capsule_plane,
    ("Box", "Plane"): box_plane,
    ("Sphere", "Sphere"): sphere_sphere,
    ("Capsule", "Sphere"): capsule_sphere,
    ("Capsule", "Capsule"): capsule_capsule,
    ("Box", "Sphere"): box_sphere,
    ("Box", "Capsule"): box_capsule,
    ("Box", "Box"): box_box,
}


def collide(shape_a, rot_a, pos_a, shape_b, rot_b, pos_b, margin):
    """Contacts between two placed shapes.

    Args:
        shape_a, shape_b: :class:`Box`, :class:`Sphere`, :class:`Capsule` or :class:`Plane`
            (a plane only against the others).
        rot_a, rot_b: World rotations, shape (..., 3, 3).
        pos_a, pos_b: World positions of the shape frames [m], shape (..., 3).
        margin: Slots with gap below this [m] are active (speculative contacts).

    Returns:
        Contacts with :func:`slot_count` slots, normals from b to a.

    Raises:
        ContactError: Unsupported pair (plane-plane) or unknown shape type.
    """
    for shape in (shape_a, shape_b):
        if not isinstance(shape, (Box, Sphere, Capsule, Plane)):
            raise ContactError(f"unknown shape type {type(shape).__name__}")
    name_a, name_b = type(shape_a).__name__, type(shape_b).__name__
    if _RANK[name_a] <= _RANK[name_b]:
        key = (name_a, name_b)
        if key not in _PAIRS:
            raise ContactError(f"no collision function for {name_a} vs {name_b}")
        return _PAIRS[key](shape_a, rot_a, pos_a, shape_b, rot_b, pos_b, margin)
    return collide(shape_b, rot_b, pos_b, shape_a, rot_a, pos_a, margin).flipped()
