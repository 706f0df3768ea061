"""The ground-truth solvers an environment can step with, by name."""

from __future__ import annotations

import newton

from nerd.modes import SOLVERS

MAXIMAL_COORDINATE_SOLVERS = ("xpbd",)
"""Solvers that integrate maximal coordinates (body_q/body_qd) and leave joint_q/joint_qd stale."""

# SOLVERS, MASS_MATRIX_REFRESH and CONTACT_FRICTION are spelled (and documented) in nerd.modes, which the command lines
# import without the engine.


__all__ = ["MAXIMAL_COORDINATE_SOLVERS", "SOLVERS", "make_solver"]


def make_solver(name: str, model: newton.Model, sim_substeps: int, mass_matrix_refresh: str
                ) -> newton.solvers.SolverBase:
    """Build ground-truth solver ``name`` for ``model``; ``mass_matrix_refresh`` applies to Featherstone only."""
    if name == "featherstone":
        interval = sim_substeps if mass_matrix_refresh == "frame" else 1
        return newton.solvers.SolverFeatherstone(model, update_mass_matrix_interval=interval)
    if name == "xpbd":
        return newton.solvers.SolverXPBD(model)
    return newton.solvers.SolverMuJoCo(model)
