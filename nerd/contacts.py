"""Fixed-size contact representation (spec §4): pre-extracted contact candidates vs. a ground plane.

Each robot gets a fixed list of C contact candidates, points on its collision shapes in body coordinates:
a sphere gives its centre, a capsule its two segment end points, a box its 8 corners, a mesh its origin.
At the end of every frame (and after every state change) :class:`AbstractContactEnvironment` detects each
candidate against its env's ground plane and writes

* the features NeRD consumes, as torch tensors of shape (N, C, ·), world frame: ground normal, candidate
  point, closest ground point and signed depth of the candidate point above the plane (shape thickness not
  subtracted), plus each candidate's thickness (radius);
* the same contacts as a Newton :class:`~newton.Contacts` set that the ground truth consumes, so the
  analytical solver and the neural model see exactly the same contacts.

The ground truth's spring-damper contact model re-evaluates penetration from the body pose at every substep;
for a plane, the closest point and normal found once per frame stay exact over the frame. Its friction law is
the environment's ``contact_friction`` (:data:`envs.environment.CONTACT_FRICTION`): ``"coulomb"`` hands the
contact set to the solver (Newton's law), ``"huber"`` evaluates :func:`eval_ground_contact_forces` (warp.sim's
Huber-smoothed law) into ``state.body_f`` at every substep and hands the solver no contacts.
"""

from __future__ import annotations

from dataclasses import dataclass

import newton
import numpy as np
import torch
import warp as wp

from envs.environment import Environment

FRICTION_SMOOTHING = 1.0  # [m/s] delta of warp.sim's Huber norm (its ``friction_smoothing`` default)

@dataclass
class ContactCandidates:
    """Contact candidates of one robot copy.

    Attributes:
        body: (C,) body index within one env.
        shape: (C,) shape index within one env.
        point: (C, 3) candidate point in body coordinates [m].
        thickness: (C,) radius of the shape at that point [m] (0 for box corners and meshes).
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
            local = [(sx * scale[0], sy * scale[1], sz * scale[2]) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]
            radius = 0.0
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
    contact_point_0: wp.array[wp.vec3],
    contact_point_1: wp.array[wp.vec3],
    contact_normal: wp.array[wp.vec3],
    contact_depth: wp.array[float],
    solver_normal: wp.array[wp.vec3],
    solver_point_1: wp.array[wp.vec3],
):
    tid = wp.tid()
    env = tid // candidate_count
    n = plane_normal[env]
    x = wp.transform_point(body_q[candidate_body[tid]], candidate_point[tid])
    depth = wp.dot(x - plane_point[env], n)
    ground = x - depth * n
    contact_point_0[tid] = x
    contact_point_1[tid] = ground
    contact_normal[tid] = n
    contact_depth[tid] = depth
    # Newton stores the normal from shape A (robot) towards shape B (ground); B has no body, so its point is world.
    solver_normal[tid] = -n
    solver_point_1[tid] = ground


@wp.func
def huber_norm(v: wp.vec3, delta: float) -> float:
    """warp.sim's ``norm_huber``: |v|²/2 up to |v| = delta, then delta·(|v| − delta/2)."""
    a = wp.dot(v, v)
    if a <= delta * delta:
        return 0.5 * a
    return delta * (wp.sqrt(a) - 0.5 * delta)


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
    """Robot-ground contact wrenches with warp.sim's friction law (robots.md §0.3), added to ``body_f``.

    Reads a Newton contact set of robot shapes (A) against a body-less ground (B), normal stored A -> B, and
    evaluates what warp.sim's ``eval_rigid_contacts`` did: gap d = n·(p_A − p_B) with n the ground normal and
    both points moved by their margins (thickness); if d < ka, normal force ke·d + kd·min(vn, 0) and friction
    ft = vt / H(vt) · min(kf·H(vt), −mu·(fn + fd)), H the Huber norm. Material: the robot shape's (the ground
    shape has none). ``body_qd`` is Newton's (COM velocity, angular velocity); wrenches are (force, torque about
    the COM), world axes, as Featherstone reads ``state.body_f``.
    """
    tid = wp.tid()
    shape = contact_shape[tid]
    body = shape_body[shape]
    n = -contact_normal[tid]
    X = body_q[body]
    p = wp.transform_point(X, contact_point0[tid]) - contact_margin0[tid] * n
    d = wp.dot(n, p - (contact_point1[tid] + contact_margin1[tid] * n))
    if d >= shape_ka[shape]:
        return
    r = p - wp.transform_point(X, body_com[body])
    twist = body_qd[body]
    v = wp.spatial_top(twist) + wp.cross(wp.spatial_bottom(twist), r)
    vn = wp.dot(n, v)
    vt = v - n * vn
    fn = d * shape_ke[shape]
    fd = wp.min(vn, 0.0) * shape_kd[shape] * wp.step(d)
    ft = wp.vec3(0.0)
    if d < 0.0:
        h = huber_norm(vt, friction_smoothing)
        if h > 0.0:
            ft = vt / h * wp.min(shape_kf[shape] * h, -shape_mu[shape] * (fn + fd))
    f = n * (fn + fd) + ft
    # f acts on the ground; the robot body gets -f.
    wp.atomic_sub(body_f, body, wp.spatial_vector(f, wp.cross(r, f)))


class AbstractContactEnvironment:
    """Wraps an :class:`~envs.environment.Environment` with fixed-size ground contacts (spec §4).

    The wrapper installs its detection as the environment's collision stage (run at the end of every frame,
    inside the captured graph, and after every state change) and hands the environment a Newton contact set
    of N * C contacts, which the next frame's solver consumes. Attributes it does not define are
    delegated to the wrapped environment, so it steps, resets and reads states like the environment itself.

    Args:
        env: The environment to wrap.
    """

    def __init__(self, env: Environment):
        self.env = env
        self.candidates = extract_contact_candidates(env.model, env.shapes_per_env)
        n, c = env.num_envs, self.candidates.count
        self.contact_count = c
        device = env.device
        self._plane_point = wp.zeros(n, dtype=wp.vec3, device=device)
        self._plane_normal = wp.array(np.tile([0.0, 0.0, 1.0], (n, 1)), dtype=wp.vec3, device=device)
        self._point_0 = wp.zeros(n * c, dtype=wp.vec3, device=device)
        self._point_1 = wp.zeros(n * c, dtype=wp.vec3, device=device)
        self._normal = wp.zeros(n * c, dtype=wp.vec3, device=device)
        self._depth = wp.zeros(n * c, dtype=float, device=device)
        self.contact_thicknesses = torch.as_tensor(
            np.tile(self.candidates.thickness, (n, 1)), device=env.torch_device
        )
        """(N, C) radius of the shape at each candidate [m]."""
        if c == 0:
            return
        env_body_offset = np.repeat(np.arange(n, dtype=np.int32) * env.bodies_per_env, c)
        env_shape_offset = np.repeat(np.arange(n, dtype=np.int32) * env.shapes_per_env, c)
        self._candidate_body = wp.array(np.tile(self.candidates.body, n) + env_body_offset, dtype=int, device=device)
        self._candidate_point = wp.array(np.tile(self.candidates.point, (n, 1)), dtype=wp.vec3, device=device)

        contacts = newton.Contacts(n * c, 0, device=device)
        contacts.rigid_contact_count.assign(np.array([n * c], dtype=np.int32))
        contacts.rigid_contact_shape0.assign(np.tile(self.candidates.shape, n) + env_shape_offset)
        # The ground is not a Newton shape: the contact takes the robot shape's material alone.
        contacts.rigid_contact_shape1.fill_(-1)
        contacts.rigid_contact_point0.assign(self._candidate_point)
        contacts.rigid_contact_margin0.assign(np.tile(self.candidates.thickness, n))
        contacts.rigid_contact_margin1.zero_()
        self.solver_contacts = contacts
        forces = self.apply_contact_forces if env.contact_friction == "huber" else None
        env.set_collision_stage(self._detect, contacts, forces)

    def __getattr__(self, name: str):
        # Only called for attributes not found on the wrapper itself.
        return getattr(self.env, name)

    def _detect(self) -> None:
        wp.launch(
            detect_plane_contacts,
            dim=self.env.num_envs * self.contact_count,
            inputs=[
                self.env.state_0.body_q,
                self._candidate_body,
                self._candidate_point,
                self.contact_count,
                self._plane_point,
                self._plane_normal,
            ],
            outputs=[
                self._point_0,
                self._point_1,
                self._normal,
                self._depth,
                self.solver_contacts.rigid_contact_normal,
                self.solver_contacts.rigid_contact_point1,
            ],
            device=self.env.device,
        )

    def apply_contact_forces(self, state: newton.State) -> None:
        """Add the contact wrenches of ``state`` (Huber friction law) to ``state.body_f``."""
        model, contacts = self.env.model, self.solver_contacts
        wp.launch(
            eval_ground_contact_forces,
            dim=self.env.num_envs * self.contact_count,
            inputs=[
                state.body_q, state.body_qd, model.body_com, model.shape_body, model.shape_material_ke,
                model.shape_material_kd, model.shape_material_kf, model.shape_material_ka, model.shape_material_mu,
                contacts.rigid_contact_shape0, contacts.rigid_contact_point0, contacts.rigid_contact_point1,
                contacts.rigid_contact_normal, contacts.rigid_contact_margin0, contacts.rigid_contact_margin1,
                FRICTION_SMOOTHING,
            ],
            outputs=[state.body_f],
            device=self.env.device,
        )

    def set_ground_planes(self, normals: torch.Tensor, points: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Set the ground plane of each env (all if ``env_ids`` is None).

        Args:
            normals: (n, 3) or (3,) unit plane normals, world frame; contacts push along the normal.
            points: (n, 3) or (3,) a point on each plane [m], world frame.
        """
        rows = slice(None) if env_ids is None else torch.as_tensor(env_ids, device=self.env.torch_device)
        normals = torch.nn.functional.normalize(torch.as_tensor(normals, dtype=torch.float32), dim=-1)
        wp.to_torch(self._plane_normal)[rows] = normals.to(self.env.torch_device)
        wp.to_torch(self._plane_point)[rows] = torch.as_tensor(points, dtype=torch.float32).to(self.env.torch_device)
        self.env.sync_torch_writes()
        if self.contact_count:
            self._detect()

    def get_ground_planes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(normals (N, 3), points (N, 3)) of the env's ground planes, world frame."""
        return wp.to_torch(self._plane_normal).clone(), wp.to_torch(self._plane_point).clone()

    def get_contacts(self) -> dict[str, torch.Tensor]:
        """Contact features of the current state, world frame (copies).

        Returns:
            ``contact_normals`` (N, C, 3), ``contact_points_0`` (N, C, 3) candidate points [m],
            ``contact_points_1`` (N, C, 3) closest ground points [m], ``contact_depths`` (N, C) [m],
            ``contact_thicknesses`` (N, C) [m].
        """
        return {name: value.clone() for name, value in self.contact_views().items()}

    def contact_views(self) -> dict[str, torch.Tensor]:
        """The same tensors as :meth:`get_contacts` without copying: views that the next step overwrites."""
        n, c = self.env.num_envs, self.contact_count
        self.env.synchronize()
        return {
            "contact_normals": wp.to_torch(self._normal).view(n, c, 3),
            "contact_points_0": wp.to_torch(self._point_0).view(n, c, 3),
            "contact_points_1": wp.to_torch(self._point_1).view(n, c, 3),
            "contact_depths": wp.to_torch(self._depth).view(n, c),
            "contact_thicknesses": self.contact_thicknesses,
        }
