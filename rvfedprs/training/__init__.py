"""Local training on one client (design §5): data, sparse SGD, DP-SGD, rare-variant influence.

- :mod:`~rvfedprs.training.data` — :class:`ClientData` (one client's samples) and batches;
- :mod:`~rvfedprs.training.config` — :class:`LocalTrainingConfig`, :class:`LocalResult`;
- :mod:`~rvfedprs.training.sgd` — :func:`local_update`: SGD (FedProx, SCAFFOLD terms) whose step
  costs O(nnz · h), equal to dense SGD;
- :mod:`~rvfedprs.training.dp` — DP-SGD with sparse per-sample clipping and one cumulative
  accountant per client (:class:`DPState`);
- :mod:`~rvfedprs.training.influence` — per-variant influence and the top variants;
- :mod:`~rvfedprs.training.compact` — the column-sparse machinery SGD and DP-SGD share;
- :mod:`~rvfedprs.training.predict` — predicted probabilities (:func:`evaluate`).
"""

from rvfedprs.training.compact import RARE_INPUT
from rvfedprs.training.config import LocalResult, LocalTrainingConfig
from rvfedprs.training.data import ClientData, batch_indices, to_torch_sparse
from rvfedprs.training.dp import DPState, dp_local_update, dp_schedule, dp_settings
from rvfedprs.training.influence import column_norms, select_influential
from rvfedprs.training.predict import evaluate
from rvfedprs.training.sgd import add_gradient_terms, local_update

__all__ = [
    "RARE_INPUT",
    "ClientData",
    "DPState",
    "LocalResult",
    "LocalTrainingConfig",
    "add_gradient_terms",
    "batch_indices",
    "column_norms",
    "dp_local_update",
    "dp_schedule",
    "dp_settings",
    "evaluate",
    "local_update",
    "select_influential",
    "to_torch_sparse",
]
