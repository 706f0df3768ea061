"""Newton robot environments, one module per robot, and the registry that builds them by name.

Layering: this package sits on the engine (Newton/Warp), :mod:`nerd.frames`, :mod:`nerd.modes` (names) and
:mod:`nerd.errors` only; the rest of ``nerd`` (features, integrator, neural environment, generation, training, RL)
builds on it, never the other way round.
``environment.py`` is the shared base (N copies, captured frame graph, state/torque tensors) with its
fixed-size ground contacts (``contacts.py``) as a component and the shared joint controllers (``control.py``);
every other module describes one robot.
"""

from __future__ import annotations

from nerd.envs.environment import Environment
from nerd.errors import UserError
from nerd.modes import ENV_NAMES, check_env_name


def env_class(name: str) -> type[Environment]:
    """Environment class registered under ``name``; the error lists the valid names."""
    # Imported lazily so that asking for one robot does not build every robot's module.
    check_env_name(name)
    if name == "Cartpole":
        from nerd.envs.cartpole import Cartpole as cls
    elif name == "PendulumWithContact":
        from nerd.envs.pendulum import PendulumWithContact as cls
    elif name == "Ant":
        from nerd.envs.ant import Ant as cls
    elif name == "Anymal":
        from nerd.envs.anymal import Anymal as cls
    elif name == "Franka":
        from nerd.envs.franka import Franka as cls
    elif name == "CubeToss":
        from nerd.envs.cube_toss import CubeToss as cls
    elif name == "Humanoid":
        from nerd.envs.humanoid import Humanoid as cls
    else:  # a name in ENV_NAMES without a branch above
        raise NotImplementedError(name)
    return cls


def make_env(name: str, num_envs: int, device: str = "cpu", solver: str | None = None, use_graph: bool = True,
             contact_config: int | None = None, mass_matrix_refresh: str | None = None,
             contact_friction: str | None = None, robot_variant: str | None = None,
             control_mode: str | None = None) -> Environment:
    """Build robot ``name`` with ``num_envs`` copies and its fixed-size ground contacts.

    Args:
        contact_config: Ground configuration id for robots that define several (the pendulum);
            None keeps the default ground, the plane z = 0.
        mass_matrix_refresh: Featherstone's mass-matrix refresh, ``"frame"`` (the release's) or ``"substep"``;
            None keeps the robot's default (see :data:`nerd.modes.MASS_MATRIX_REFRESH`).
        contact_friction: Ground-contact friction law, ``"coulomb"`` (Newton's) or ``"huber"`` (warp.sim's);
            None keeps the robot's default (see :data:`nerd.modes.CONTACT_FRICTION`).
        robot_variant: One of the robot's :attr:`~nerd.envs.environment.Environment.robot_variants` (``Anymal``:
            ``"physical"`` or ``"release"``; ``CubeToss``: ``"sim"`` or ``"real"``); None keeps the robot's default.
            A robot without variants refuses one.
        control_mode: Controller of robots that offer several (``Environment.control_modes``; Anymal:
            ``"position"`` or ``"torque"``; Franka: ``"torque"`` or ``"position"``); None keeps the robot's
            default. Any other robot refuses a control mode.
    """
    cls = env_class(name)
    if contact_config is not None and not hasattr(cls, "ground_plane"):
        raise UserError(f"{name} has a single ground; --contact-config applies to PendulumWithContact only")
    kwargs = {}
    # Options only some robots define are passed on only when given, and refused by the others.
    for key, value, choices, what in (("robot_variant", robot_variant, "robot_variants", "variant"),
                                      ("control_mode", control_mode, "control_modes", "controller")):
        if value is None:
            continue
        if not getattr(cls, choices):
            raise UserError(f"{name} has a single {what}; --{key.replace('_', '-')} applies to "
                            f"{', '.join(n for n in ENV_NAMES if getattr(env_class(n), choices))} only")
        kwargs[key] = value
    env = cls(num_envs, device=device, solver=solver, use_graph=use_graph, mass_matrix_refresh=mass_matrix_refresh,
              contact_friction=contact_friction, **kwargs)
    if contact_config is not None:
        normal, point = cls.ground_plane(contact_config)
        env.set_ground_planes(normal.expand(num_envs, 3), point.expand(num_envs, 3))
    return env


__all__ = ["ENV_NAMES", "Environment", "env_class", "make_env"]
