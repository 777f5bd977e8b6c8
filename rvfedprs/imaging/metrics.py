"""Classification metrics of Riyadi et al. eq. 8–13.

Accuracy, precision, recall, F1, ROC-AUC, log-loss.  Binary tasks use the positive class;
multi-class tasks macro-average precision, recall and F1, and use one-vs-rest macro ROC-AUC.
ROC-AUC is NaN when the test set holds one class only (reported, not dropped).
"""

from __future__ import annotations

import numpy as np

__all__ = ["classification_metrics", "METRIC_NAMES"]

METRIC_NAMES = ("accuracy", "precision", "recall", "f1", "roc_auc", "log_loss")


def classification_metrics(
    y_true: np.ndarray, probabilities: np.ndarray, n_classes: int
) -> dict[str, float]:
    """The six metrics.

    Parameters
    ----------
    y_true : array of int, shape (n,)
    probabilities : array, shape (n,) (binary: P(y = 1)) or (n, n_classes)
    n_classes : int

    Returns
    -------
    dict of str to float
        Keys :data:`METRIC_NAMES`.
    """
    from sklearn.metrics import (
        accuracy_score,
        f1_score,
        log_loss,
        precision_score,
        recall_score,
        roc_auc_score,
    )

    y = np.asarray(y_true).astype(np.int64).ravel()
    p = np.asarray(probabilities, dtype=np.float64)
    if len(y) == 0:
        raise ValueError("classification_metrics needs at least one sample")
    if n_classes == 2:
        p1 = p if p.ndim == 1 else p[:, 1]
        p1 = np.clip(p1, 1e-7, 1 - 1e-7)
        pred = (p1 >= 0.5).astype(np.int64)
        full = np.column_stack([1 - p1, p1])
        avg = "binary"
        auc = roc_auc_score(y, p1) if len(np.unique(y)) == 2 else float("nan")
    else:
        full = np.clip(p, 1e-7, 1.0)
        full = full / full.sum(axis=1, keepdims=True)
        pred = full.argmax(axis=1)
        avg = "macro"
        present = np.unique(y)
        if len(present) < 2:
            auc = float("nan")
        else:
            # one-vs-rest over the classes present in y_true
            auc = float(np.mean([roc_auc_score((y == c).astype(int), full[:, c]) for c in present]))
    return {
        "accuracy": float(accuracy_score(y, pred)),
        "precision": float(precision_score(y, pred, average=avg, zero_division=0)),
        "recall": float(recall_score(y, pred, average=avg, zero_division=0)),
        "f1": float(f1_score(y, pred, average=avg, zero_division=0)),
        "roc_auc": float(auc),
        "log_loss": float(log_loss(y, full, labels=list(range(n_classes)))),
    }
