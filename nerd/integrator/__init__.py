"""The NeRD integrator: a learned Newton solver."""

from nerd.integrator.nerd_integrator import NeRDIntegrator, RolloutDivergedError

__all__ = ["NeRDIntegrator", "RolloutDivergedError"]
