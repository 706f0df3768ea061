"""Fixed-size contact representation (the paper's): pre-extracted contact candidates vs. a ground plane.

Each robot gets a fixed list of C contact candidates, points on its collision shapes in body coordinates:
a sphere gives its centre, a capsule its two segment end points, a box its 8 corners, a mesh its origin.
At the end of every frame (and after every state change) :class:`GroundContacts`, a component of every
:class:`~nerd.envs.environment.Environment`, detects each candidate against its env's ground plane and writes
the result as a Newton :class:`~newton.Contacts` set: the set the ground-truth solver consumes and the
:class:`~nerd.integrator.NeRDIntegrator` reads. :func:`contact_features` turns such a set into the features
NeRD consumes (torch tensors of shape (N, C, ·), world frame: ground normal, candidate point, closest ground
point, signed depth of the candidate point above the plane with the shape thickness not subtracted, and each
candidate's thickness); the environment's getters and the integrator both call it, so the analytical solver,
the datasets and the neural model see exactly the same contacts.

The ground truth's spring-damper contact model re-evaluates penetration from the body pose at every substep;
for a plane, the closest point and normal found once per frame stay exact over the frame. Its friction law is
the environment's ``contact_friction`` (:data:`nerd.modes.CONTACT_FRICTION`): ``"coulomb"`` hands the
contact set to the solver (Newton's law); ``"huber"`` evaluates :func:`eval_ground_contact_forces` (warp.sim's
Huber-smoothed law) into ``state.body_f`` at every substep and hands the solver no contacts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import newton
import numpy as np
import torch
import warp as wp

from nerd.frames import transform_point

FRICTION_SMOOTHING = 1.0  # [m/s] delta of warp.sim's Huber norm (its ``friction_smoothing`` default)
HUBER_TINY = wp.constant(1.0e-18)  # [m²/s²] Huber norms below this slide viscously without a division by the norm


class ContactAugmentation(Protocol):
    """Extra ground-contact forces evaluated inside every substep, before the contact law (an environment's
    ``contact_augmentation``, e.g. :class:`nerd.hybrid.ContactForceAugmentation`)."""

    def weights(self) -> tuple[torch.Tensor, ...]:
        """The trainable tensors, in the order :meth:`apply_forces` takes their Warp copies."""
        ...

    def apply_forces(self, model: newton.Model, state: newton.State, contacts: newton.Contacts | None,
                     weights: Sequence[wp.array] | None = None) -> None:
        """Add the forces of ``state``'s contacts to ``state.body_f``, with ``weights`` (or the current ones)."""
        ...


@dataclass
class ContactCandidates:
    """Contact candidates of one robot copy.

    Attributes:
        body: (C,) body index within one env.
        shape: (C,) shape index within one env.
        point: (C, 3) candidate point in body coordinates [m].
        thickness: (C,) radius of the shape at that point [m]; for box corners the box's contact margin (Newton's
            ``margin``, warp.sim's box "thickness", 0 unless the robot sets one); 0 for meshes.
    """

    body: np.ndarray
    shape: np.ndarray
    point: np.ndarray
    thickness: np.ndarray

    @property
    def count(self) -> int:
        """Number of candidates C."""
        return len(self.body)


def extract_contact_candidates(model: newton.Model, shapes_per_env: int) -> ContactCandidates:
    """Extract the contact candidates of the first robot copy from the colliding shapes of ``model``.

    Capsule end points are ordered (-half_height, +half_height) along the capsule's local z axis.
    """
    shape_type = model.shape_type.numpy()[:shapes_per_env]
    shape_flags = model.shape_flags.numpy()[:shapes_per_env]
    shape_body = model.shape_body.numpy()[:shapes_per_env]
    shape_xform = model.shape_transform.numpy()[:shapes_per_env]
    shape_scale = model.shape_scale.numpy()[:shapes_per_env]
    shape_margin = model.shape_margin.numpy()[:shapes_per_env]
    bodies, shapes, points, thicknesses = [], [], [], []
    for s in range(shapes_per_env):
        if not shape_flags[s] & newton.ShapeFlags.COLLIDE_SHAPES or shape_body[s] < 0:
            continue
        scale = shape_scale[s]
        if shape_type[s] == newton.GeoType.SPHERE:
            local, radius = [(0.0, 0.0, 0.0)], scale[0]
        elif shape_type[s] == newton.GeoType.CAPSULE:
            local, radius = [(0.0, 0.0, -scale[1]), (0.0, 0.0, scale[1])], scale[0]
        elif shape_type[s] == newton.GeoType.BOX:
            signs = (-1, 1)
            # warp.sim's get_box_vertex order: bit 0 = x, bit 1 = y, bit 2 = z (0 = -, 1 = +).
            local = [(sx * scale[0], sy * scale[1], sz * scale[2]) for sz in signs for sy in signs for sx in signs]
            radius = shape_margin[s]
        else:
            # Meshes and other geometry: the shape origin only (a known weakness of the representation).
            local, radius = [(0.0, 0.0, 0.0)], 0.0
        xform = wp.transform(*shape_xform[s])
        for p in local:
            bodies.append(shape_body[s])
            shapes.append(s)
            points.append(np.array(wp.transform_point(xform, wp.vec3(*p))))
            thicknesses.append(radius)
    return ContactCandidates(
        body=np.asarray(bodies, dtype=np.int32),
        shape=np.asarray(shapes, dtype=np.int32),
        point=np.asarray(points, dtype=np.float32).reshape(-1, 3),
        thickness=np.asarray(thicknesses, dtype=np.float32),
    )


@wp.kernel
def detect_plane_contacts(
    body_q: wp.array[wp.transform],
    candidate_body: wp.array[int],
    candidate_point: wp.array[wp.vec3],
    candidate_count: int,
    plane_point: wp.array[wp.vec3],
    plane_normal: wp.array[wp.vec3],
    # outputs
    contact_normal: wp.array[wp.vec3],
    contact_point_1: wp.array[wp.vec3],
):
    tid = wp.tid()
    env = tid // candidate_count
    n = plane_normal[env]
    x = wp.transform_point(body_q[candidate_body[tid]], candidate_point[tid])
    depth = wp.dot(x - plane_point[env], n)
    # Newton stores the normal from shape A (robot) towards shape B (ground); B has no body, so its point is world.
    contact_normal[tid] = -n
    contact_point_1[tid] = x - depth * n


def contact_features(body_q: torch.Tensor, candidate_body: torch.Tensor, contacts: newton.Contacts, num_envs: int,
                     to_torch: Callable[[wp.array], torch.Tensor] = wp.to_torch) -> dict[str, torch.Tensor]:
    """NeRD's contact features of a Newton contact set of ``num_envs`` x C ground contacts, world frame.

    The one place that reads Newton's contact conventions back: the normal points from the robot into the
    ground (the features use the ground's outward normal), ``rigid_contact_point0`` is the candidate point in
    body coordinates, ``rigid_contact_point1`` the ground point in the world, ``rigid_contact_margin0`` the
    candidate's thickness.

    Args:
        body_q: (num_envs * bodies_per_env, 7) body poses [p, quat xyzw], world frame.
        candidate_body: (num_envs * C,) index into ``body_q`` of each contact's body.
        contacts: The contact set (robot shape first, ground second).
        num_envs: Number of envs N.
        to_torch: How the contact set's arrays are viewed in torch (a caller may pass views it made once).

    Returns:
        New tensors (not views of the contact set): ``contact_normals`` (N, C, 3), ``contact_points_0``
        (N, C, 3) candidate points [m], ``contact_points_1`` (N, C, 3) closest ground points [m],
        ``contact_depths`` (N, C) signed distance of the candidate point above the plane [m],
        ``contact_thicknesses`` (N, C) [m].
    """
    n = num_envs
    x = transform_point(body_q[candidate_body], to_torch(contacts.rigid_contact_point0))
    normal = -to_torch(contacts.rigid_contact_normal)
    ground = to_torch(contacts.rigid_contact_point1).clone()
    return {
        "contact_normals": normal.view(n, -1, 3),
        "contact_points_0": x.view(n, -1, 3),
        "contact_points_1": ground.view(n, -1, 3),
        "contact_depths": ((x - ground) * normal).sum(-1).view(n, -1),
        "contact_thicknesses": to_torch(contacts.rigid_contact_margin0).view(n, -1).clone(),
    }


@wp.func
def huber_norm(v: wp.vec3, delta: float) -> float:
    """warp.sim's ``norm_huber``: |v|²/2 up to |v| = delta, then delta·(|v| − delta/2)."""
    a = wp.dot(v, v)
    if a <= delta * delta:
        return 0.5 * a
    return delta * (wp.sqrt(a) - 0.5 * delta)


@wp.func
def ground_contact_point(X: wp.transform, point0: wp.vec3, point1: wp.vec3, normal: wp.vec3, margin0: float,
                        margin1: float):
    """A robot-ground contact of a Newton contact set (robot shape A, body pose ``X``; body-less ground B; normal
    stored A -> B): the ground's outward normal n, the robot's contact point p (world, moved by its margin) and
    the gap d = n·(p − ground point) (negative: penetration)."""
    n = -normal
    p = wp.transform_point(X, point0) - margin0 * n
    d = wp.dot(n, p - (point1 + margin1 * n))
    return n, p, d


@wp.func
def contact_point_velocity(X: wp.transform, com: wp.vec3, twist: wp.spatial_vector, n: wp.vec3, p: wp.vec3):
    """At point p (world) of a body with pose X, centre of mass ``com`` (body frame) and Newton twist (COM velocity,
    angular velocity): the lever r from the COM, and the point's velocity along n and across it."""
    r = p - wp.transform_point(X, com)
    v = wp.spatial_top(twist) + wp.cross(wp.spatial_bottom(twist), r)
    vn = wp.dot(n, v)
    return r, vn, v - n * vn


@wp.kernel
def eval_ground_contact_forces(
    body_q: wp.array[wp.transform],
    body_qd: wp.array[wp.spatial_vector],
    body_com: wp.array[wp.vec3],
    shape_body: wp.array[int],
    shape_ke: wp.array[float],
    shape_kd: wp.array[float],
    shape_kf: wp.array[float],
    shape_ka: wp.array[float],
    shape_mu: wp.array[float],
    contact_shape: wp.array[int],
    contact_point0: wp.array[wp.vec3],
    contact_point1: wp.array[wp.vec3],
    contact_normal: wp.array[wp.vec3],
    contact_margin0: wp.array[float],
    contact_margin1: wp.array[float],
    friction_smoothing: float,
    # output
    body_f: wp.array[wp.spatial_vector],
):
    """Robot-ground contact wrenches with warp.sim's Huber-smoothed friction, added to ``body_f``.

    Reads a Newton contact set of robot shapes (A) against a body-less ground (B), normal stored A -> B, and
    evaluates the law of warp.sim's ``eval_rigid_contacts``: gap d = n·(p_A − p_B) with n the
    ground normal and both points moved by their margins (thickness); if d < ka, normal force ke·d + kd·min(vn, 0)
    and friction ft = vt / H(vt) · min(kf·H(vt), −mu·(fn + fd)), H the Huber norm. Material: the robot shape's
    (the ground is not a shape). ``body_qd`` is Newton's (COM velocity, angular velocity); wrenches are (force,
    torque about the COM), world axes, as Featherstone reads ``state.body_f``.
    """
    tid = wp.tid()
    shape = contact_shape[tid]
    body = shape_body[shape]
    X = body_q[body]
    n, p, d = ground_contact_point(X, contact_point0[tid], contact_point1[tid], contact_normal[tid],
                                   contact_margin0[tid], contact_margin1[tid])
    if d >= shape_ka[shape]:
        return
    r, vn, vt = contact_point_velocity(X, body_com[body], body_qd[body], n, p)
    fn = d * shape_ke[shape]
    fd = wp.min(vn, 0.0) * shape_kd[shape] * wp.step(d)
    ft = wp.vec3(0.0)
    if d < 0.0:
        h = huber_norm(vt, friction_smoothing)
        if h > HUBER_TINY:
            ft = vt / h * wp.min(shape_kf[shape] * h, -shape_mu[shape] * (fn + fd))
        elif h > 0.0:
            # The same force in the viscous regime (kf·h is the smaller term there), without dividing by h: the
            # adjoint of vt / h would square h below float32's range (NaN gradients of a cube at rest).
            ft = vt * wp.min(shape_kf[shape], -shape_mu[shape] * (fn + fd) / HUBER_TINY)
    f = n * (fn + fd) + ft
    # f acts on the ground; the robot body gets -f.
    wp.atomic_sub(body_f, body, wp.spatial_vector(f, wp.cross(r, f)))


class GroundContacts:
    """Fixed-size ground contacts of N robot copies: the collision stage of an environment.

    Owns each env's ground plane and a Newton contact set of N * C contacts (C candidates per copy), which the
    environment's solver consumes; :meth:`detect` refreshes it for the current body poses. A robot without
    collision shapes has C = 0 and no contact set.

    Args:
        model: The Newton model of the N robot copies.
        num_envs: Number of copies N.
        bodies_per_env, shapes_per_env: Bodies and shapes of one copy.
    """

    def __init__(self, model: newton.Model, num_envs: int, bodies_per_env: int, shapes_per_env: int):
        self.candidates = extract_contact_candidates(model, shapes_per_env)
        n, c = num_envs, self.candidates.count
        self.num_envs = num_envs
        self.count = c
        """Contact candidates C per env."""
        self.device = model.device
        self._torch_device = wp.device_to_torch(model.device)
        self._plane_point = wp.zeros(n, dtype=wp.vec3, device=self.device)
        self._plane_normal = wp.array(np.tile([0.0, 0.0, 1.0], (n, 1)), dtype=wp.vec3, device=self.device)
        self.contacts: newton.Contacts | None = None
        """The contact set the solver consumes, or None for a robot without contact candidates."""
        if c == 0:
            return
        env_body_offset = np.repeat(np.arange(n, dtype=np.int32) * bodies_per_env, c)
        env_shape_offset = np.repeat(np.arange(n, dtype=np.int32) * shapes_per_env, c)
        candidate_body = np.tile(self.candidates.body, n) + env_body_offset
        self._candidate_body = wp.array(candidate_body, dtype=int, device=self.device)
        self._candidate_body_torch = torch.as_tensor(candidate_body, dtype=torch.long, device=self._torch_device)
        self._candidate_point = wp.array(np.tile(self.candidates.point, (n, 1)), dtype=wp.vec3, device=self.device)

        contacts = newton.Contacts(n * c, 0, device=self.device)
        contacts.rigid_contact_count.assign(np.array([n * c], dtype=np.int32))
        contacts.rigid_contact_shape0.assign(np.tile(self.candidates.shape, n) + env_shape_offset)
        # The ground is not a Newton shape: the contact takes the robot shape's material alone.
        contacts.rigid_contact_shape1.fill_(-1)
        contacts.rigid_contact_point0.assign(self._candidate_point)
        contacts.rigid_contact_margin0.assign(np.tile(self.candidates.thickness, n))
        contacts.rigid_contact_margin1.zero_()
        self.contacts = contacts

    def detect(self, body_q: wp.array) -> None:
        """Refresh the contact set for body poses ``body_q`` (captured into the frame graph)."""
        if self.contacts is None:
            return
        wp.launch(
            detect_plane_contacts,
            dim=self.num_envs * self.count,
            inputs=[body_q, self._candidate_body, self._candidate_point, self.count, self._plane_point,
                    self._plane_normal],
            outputs=[self.contacts.rigid_contact_normal, self.contacts.rigid_contact_point1],
            device=self.device,
        )

    def apply_huber_forces(self, model: newton.Model, state: newton.State,
                           contacts: newton.Contacts | None = None) -> None:
        """Add the contact wrenches of ``state`` under the Huber friction law to ``state.body_f``, from
        ``contacts`` (a contact set of this layout, e.g. one per frame on a Warp tape) or this stage's own."""
        if self.contacts is None:
            return
        c = self.contacts if contacts is None else contacts
        wp.launch(
            eval_ground_contact_forces,
            dim=self.num_envs * self.count,
            inputs=[state.body_q, state.body_qd, model.body_com, model.shape_body, model.shape_material_ke,
                    model.shape_material_kd, model.shape_material_kf, model.shape_material_ka,
                    model.shape_material_mu, c.rigid_contact_shape0, c.rigid_contact_point0, c.rigid_contact_point1,
                    c.rigid_contact_normal, c.rigid_contact_margin0, c.rigid_contact_margin1, FRICTION_SMOOTHING],
            outputs=[state.body_f],
            device=self.device,
        )

    def set_planes(self, normals: torch.Tensor, points: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set the ground plane of ``env_ids`` (all if None); call :meth:`detect` afterwards.

        Args:
            normals: (n, 3) or (3,) plane normals (normalised here), world frame; contacts push along the normal.
            points: (n, 3) or (3,) a point on each plane [m], world frame.
        """
        rows = slice(None) if env_ids is None else torch.as_tensor(env_ids, device=self._torch_device)
        normals = torch.nn.functional.normalize(torch.as_tensor(normals, dtype=torch.float32), dim=-1)
        wp.to_torch(self._plane_normal)[rows] = normals.to(self._torch_device)
        wp.to_torch(self._plane_point)[rows] = torch.as_tensor(points, dtype=torch.float32).to(self._torch_device)

    def planes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of each env's ground plane: (normals (N, 3), points (N, 3)), world frame."""
        return wp.to_torch(self._plane_normal).clone(), wp.to_torch(self._plane_point).clone()

    def features(self, body_q: wp.array) -> dict[str, torch.Tensor]:
        """:func:`contact_features` of the current contact set, each (N, 0, ·) for a robot without candidates."""
        if self.contacts is None:
            n, dev = self.num_envs, self._torch_device
            return {"contact_normals": torch.zeros(n, 0, 3, device=dev),
                    "contact_points_0": torch.zeros(n, 0, 3, device=dev),
                    "contact_points_1": torch.zeros(n, 0, 3, device=dev),
                    "contact_depths": torch.zeros(n, 0, device=dev),
                    "contact_thicknesses": torch.zeros(n, 0, device=dev)}
        return contact_features(wp.to_torch(body_q), self._candidate_body_torch, self.contacts, self.num_envs)
