"""The NeRD integrator: a learned Newton solver, alone or as an ensemble of models."""

from nerd.integrator.ensemble import NeRDEnsembleIntegrator
from nerd.integrator.nerd_integrator import NeRDIntegrator, RolloutDivergedError

__all__ = ["NeRDEnsembleIntegrator", "NeRDIntegrator", "RolloutDivergedError"]
