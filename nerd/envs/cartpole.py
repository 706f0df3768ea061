"""Cartpole: a cart on a prismatic rail along +x and a continuous pole hinged about +y.

Physical parameters follow the public NeRD release so that policies transfer between implementations. Its
URDF importer ignored the URDF's inertial tags and derived mass and inertia from the collision boxes at
1000 kg/m^3; we state the same geometry and let Newton integrate it: cart 0.5 x 0.5 x 0.2 m -> 50 kg,
pole 0.05 x 0.05 x 1.0 m centred 0.5 m above the hinge -> 2.5 kg, 0.2089 kg·m^2 about its centre.
theta = 0 is the pole upright; positive theta tilts the tip towards +x.
"""

from __future__ import annotations

import newton
import torch
import warp as wp

from nerd.envs.environment import Environment, uniform

DENSITY = 1000.0  # [kg/m^3]
CART_HALF_EXTENTS = (0.25, 0.25, 0.1)  # [m]
POLE_HALF_EXTENTS = (0.025, 0.025, 0.5)  # [m]
ARMATURE = 0.01
RAIL_LIMIT = 4.0  # [m]
RAIL_LIMIT_KE = 1.0e4
RAIL_LIMIT_KD = 10.0
ACTION_SCALE = 1500.0  # [N] cart force per unit action
# Data generation (the release's): initial states and white-noise force amplitude.
INIT_Q_RANGE = (3.5, torch.pi)
INIT_QD_RANGE = (10.0, 10.0)
TORQUE_NOISE_SCALE = (1500.0, 0.0)
# Task reset (the release's): x, x_dot, theta_dot ~ U(-1, 1), theta ~ U(-pi, pi).
RESET_RANGE = (1.0, torch.pi, 1.0, 1.0)
# Near-limit starts (ours, --initial-states limits): the cart this far from the rail's centre [m] and this fast
# towards the nearer stop [m/s], the pole as in the task reset. Passive motion from the task reset meets the stops
# slowly (median ~0.7 m/s, < 0.1 m deep); such bounces are 0.25 % of the sampler's data (docs/notebook/accuracy.md).
LIMIT_START_X = (3.2, 4.0)
LIMIT_START_SPEED = (-0.5, 1.5)


class Cartpole(Environment):
    """Cart-pole, 2 DoF (cart x [m], pole theta [rad]); only the cart is actuated."""

    name = "Cartpole"
    random_torque_box = TORQUE_NOISE_SCALE
    """Cart force uniform in ±1500 N, no pole torque."""
    frame_dt = 1.0 / 60.0
    sim_substeps = 5
    states_frame = "world"
    continuous_q_indices = (1,)
    anchor_body = 0
    passive_metrics = {"cart_position_error": ("abs", (0,)), "pole_angle_error": ("abs", (1,))}
    joint_limits = ((0, -RAIL_LIMIT, RAIL_LIMIT),)
    mirror_joint_signs = (-1.0, -1.0)
    """x -> -x, theta -> -theta: the rail (its stops at ±4 m), gravity and the upright pole are symmetric."""

    def build_robot(self, builder: newton.ModelBuilder) -> None:
        """Add the cart (prismatic along x) and the pole (revolute about y, unlimited)."""
        # Cartpole has no contacts: shapes only carry mass and inertia.
        cfg = newton.ModelBuilder.ShapeConfig(density=DENSITY, has_shape_collision=False, has_particle_collision=False)
        cart = builder.add_link(label="cart")
        builder.add_shape_box(cart, hx=CART_HALF_EXTENTS[0], hy=CART_HALF_EXTENTS[1], hz=CART_HALF_EXTENTS[2], cfg=cfg)
        pole = builder.add_link(label="pole")
        builder.add_shape_box(
            pole,
            xform=wp.transform((0.0, 0.0, POLE_HALF_EXTENTS[2]), wp.quat_identity()),
            hx=POLE_HALF_EXTENTS[0],
            hy=POLE_HALF_EXTENTS[1],
            hz=POLE_HALF_EXTENTS[2],
            cfg=cfg,
        )
        rail = builder.add_joint_prismatic(
            -1, cart, axis=(1.0, 0.0, 0.0), limit_lower=-RAIL_LIMIT, limit_upper=RAIL_LIMIT,
            limit_ke=RAIL_LIMIT_KE, limit_kd=RAIL_LIMIT_KD, armature=ARMATURE, label="slider",
        )
        hinge = builder.add_joint_revolute(
            cart, pole, axis=(0.0, 1.0, 0.0), limit_ke=0.0, limit_kd=0.0, armature=ARMATURE, label="pole_hinge"
        )
        builder.add_articulation([rail, hinge], label="cartpole")

    @property
    def action_dim(self) -> int:
        """One action: the cart force, in [-1, 1]."""
        return 1

    def compute_torques(self, actions: torch.Tensor) -> torch.Tensor:
        """Cart force = clamp(a, -1, 1) * 1500 N; the pole hinge is passive."""
        force = actions.clamp(-1.0, 1.0) * ACTION_SCALE
        return torch.cat([force, torch.zeros_like(force)], dim=1)

    def sample_initial_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """x in [-3.5, 3.5] m, theta in [-pi, pi], both rates in [-10, 10]."""
        high = (*INIT_Q_RANGE, *INIT_QD_RANGE)
        return uniform([-h for h in high], high, n, generator).to(self.torch_device)

    def sample_reset_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Task reset: x, x_dot, theta_dot in [-1, 1], theta in [-pi, pi]."""
        return uniform([-h for h in RESET_RANGE], RESET_RANGE, n, generator).to(self.torch_device)

    def sample_limit_states(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """|x| in [3.2, 4.0] m on a random side, x_dot towards that side's stop in [-0.5, 1.5] m/s, the pole as in
        the task reset: slow bounces off the rail's end stops."""
        pole = (RESET_RANGE[1], RESET_RANGE[3])
        s = uniform((LIMIT_START_X[0], LIMIT_START_SPEED[0], -pole[0], -pole[1]),
                    (LIMIT_START_X[1], LIMIT_START_SPEED[1], *pole), n, generator)
        side = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
        return torch.stack([side * s[:, 0], s[:, 2], side * s[:, 1], s[:, 3]], dim=1).to(self.torch_device)
