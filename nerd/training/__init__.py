"""Training a NeRD model: one explicit loop over dataset windows.

batch -> normalised MSE over every causal position -> backward -> clip -> Adam step, with a linear learning-
rate decay; after every epoch a validation loss, a short passive rollout against the ground truth, TensorBoard
scalars and checkpoints (``nn/last.pt``, and ``nn/best.pt`` by rollout error or validation loss) in the run directory.

Modules: :mod:`~nerd.training.config` (the run's config), :mod:`~nerd.training.schedule` (learning rate, validation
loss), :mod:`~nerd.training.loop` (:func:`train` and its epochs), :mod:`~nerd.training.epoch` (one epoch, its
rollout check and the candidates for ``best.pt``), :mod:`~nerd.training.resume` (resume, fine-tune, weight
averaging), :mod:`~nerd.training.curve` (``curve.csv`` / ``curve.png``), :mod:`~nerd.training.data_range` (the
data range of an older checkpoint). The data-parallel steps are in :mod:`nerd.distributed`.
"""

from nerd.training.config import (
    MODEL_SIZE_SECTION,
    ROLLOUT_DIVERGED,
    RUN_CHECKPOINT,
    RUN_DIR_ENTRIES,
    DatasetConfig,
    RolloutEvalConfig,
    TrainConfig,
    model_options,
)
from nerd.training.curve import write_training_curve
from nerd.training.data_range import record_data_range
from nerd.training.epoch import best_score_meaning
from nerd.training.loop import train
from nerd.training.resume import check_init_from, check_resume_config, resume_changes
from nerd.training.schedule import get_lr, validation_loss

__all__ = [
    "MODEL_SIZE_SECTION", "ROLLOUT_DIVERGED", "RUN_CHECKPOINT", "RUN_DIR_ENTRIES", "DatasetConfig",
    "RolloutEvalConfig", "TrainConfig", "best_score_meaning", "check_init_from", "check_resume_config", "get_lr",
    "model_options", "record_data_range", "resume_changes", "train", "validation_loss", "write_training_curve",
]
