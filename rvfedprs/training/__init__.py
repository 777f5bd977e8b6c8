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

import importlib

#: Where each name lives: imported on first use (PEP 562), so that a process that only needs
#: :class:`ClientData` (a site answering a query) does not import torch and opacus.
_HOMES = {
    "RARE_INPUT": "compact",
    "LocalResult": "config",
    "LocalTrainingConfig": "config",
    "ClientData": "data",
    "batch_indices": "data",
    "to_torch_sparse": "data",
    "DPState": "dp",
    "dp_local_update": "dp",
    "dp_schedule": "dp",
    "dp_settings": "config",
    "column_norms": "influence",
    "select_influential": "influence",
    "evaluate": "predict",
    "add_gradient_terms": "sgd",
    "local_update": "sgd",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


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
