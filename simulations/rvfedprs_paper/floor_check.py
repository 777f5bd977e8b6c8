"""The floor check (issue 29): every model chosen on validation against the PRS-only floor.

Every trained model starts from the floor (``model.start_from_floor``) and the round chosen on
validation may be the floor itself (round 0), so a chosen model's validation AUC can never be
below the floor's: one that is, is a bug. On the test split it may fall below by chance; the
check gives each strategy's test AUC beside the floor's, both with DeLong 95% intervals, and
the paired difference (the same test samples) with DeLong's interval for correlated AUCs.

Reads what the workflow's training and evaluation rules wrote in ``WORKDIR``
(``snakemake ... results/train/comparison.md`` with ``train.validation_fraction`` > 0):
``results/train/<strategy>/metrics.json`` (the validation choice: ``selection``) and
``results/evaluate/<strategy>/{metrics.json,predictions.parquet}`` (the chosen models' test
metrics and scores). Writes ``floor_check.tsv`` and ``floor_check.md`` into ``--out``.

Usage::

    python simulations/rvfedprs_paper/floor_check.py --workdir WORKDIR \\
        --strategies fedavg,fedce,fedglm,fedce_glm,centralized --out OUT
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation.checks import Z95
from rvfedprs.exceptions import InputDataError

__all__ = ["validation_row", "paired_with_floor", "floor_check_table", "to_markdown", "main"]


def validation_row(strategy: str, trained: Mapping[str, Any]) -> dict[str, Any]:
    """The validation choice of one run's ``metrics.json``.

    Returns
    -------
    dict
        ``strategy``, ``selected_round`` (0: the floor), ``validation_auc`` (the chosen
        round's), ``floor_validation_auc``, ``validation_delta`` and ``below_floor`` (the
        chosen model is below the floor on validation: a bug).

    Raises
    ------
    InputDataError
        When the run chose nothing on validation (``train.validation_fraction`` was 0) or did
        not score the floor (``start_from_floor`` off).
    """
    selection = trained.get("selection")
    if not selection:
        raise InputDataError(
            f"{strategy}: metrics.json has no 'selection': train with train.validation_fraction > 0"
        )
    floor = selection.get("floor_validation_auc")
    if floor is None:
        raise InputDataError(
            f"{strategy}: the floor was not scored on validation (model.start_from_floor false?)"
        )
    chosen = float(selection["validation_auc"])
    return {
        "strategy": strategy,
        "selected_round": int(selection["selected_round"]),
        "rounds": len(selection.get("validation_aucs", [])),
        "validation_auc": chosen,
        "floor_validation_auc": float(floor),
        "validation_delta": chosen - float(floor),
        "below_floor": chosen < float(floor),
    }


def paired_with_floor(y: np.ndarray, scores: np.ndarray, floor: np.ndarray) -> dict[str, float]:
    """Test AUC(model) − AUC(floor) on the same samples: DeLong's paired 95% interval and p."""
    from rvfedprs.evaluation.paired import delong_test

    found = delong_test(y, scores, floor)
    return {
        "test_delta": found.difference,
        "test_delta_low": found.difference - Z95 * found.se,
        "test_delta_high": found.difference + Z95 * found.se,
        "test_delta_p": found.p_value,
    }


def floor_check_table(workdir: str | Path, strategies: Sequence[str]) -> pd.DataFrame:
    """One row per strategy: validation choice, test AUC and the floor's, paired difference."""
    from rvfedprs.evaluation.metrics import roc_auc
    from rvfedprs.evaluation.paired import auc_standard_error
    from rvfedprs.genomic.data import load_federation
    from rvfedprs.protocol.references import prs_only_scores

    results = Path(workdir) / "results"
    federation = load_federation(results)
    test = federation.test
    clients = sorted(test)
    ids = [s for c in clients for s in test[c].sample_ids]
    y = np.concatenate([test[c].y for c in clients]).astype(np.int8)
    floor_scores = prs_only_scores(federation.train, test)
    floor = np.concatenate([floor_scores[c] for c in clients])
    floor_auc, floor_se = roc_auc(y, floor), auc_standard_error(y, floor)
    rows = []
    for name in strategies:
        trained = json.loads((results / "train" / name / "metrics.json").read_text())
        evaluated = json.loads((results / "evaluate" / name / "metrics.json").read_text())
        frame = pd.read_parquet(results / "evaluate" / name / "predictions.parquet")
        by_id = dict(zip(frame["sample_id"].astype(str), frame["p"], strict=True))
        missing = [s for s in ids if s not in by_id]
        if missing:
            raise InputDataError(f"{name}: no prediction for {len(missing)} test samples")
        scores = np.array([by_id[s] for s in ids], dtype=np.float64)
        rows.append(
            {
                **validation_row(name, trained),
                "test_auc": float(evaluated["auc"]),
                "test_auc_se": float(evaluated["auc_se"]),
                "floor_test_auc": float(floor_auc),
                "floor_test_auc_se": float(floor_se),
                **paired_with_floor(y, scores, floor),
                "wall_s": _wall_seconds(results / "train" / name / "benchmark.tsv"),
            }
        )
    return pd.DataFrame(rows)


def _wall_seconds(benchmark: Path) -> float:
    if not benchmark.is_file():
        return float("nan")
    return float(pd.read_csv(benchmark, sep="\t")["s"].iloc[0])


def _interval(value: float, se: float) -> str:
    if not math.isfinite(se):
        return f"{value:.3f}"
    return f"{value:.3f} [{value - Z95 * se:.3f}, {value + Z95 * se:.3f}]"


def to_markdown(table: pd.DataFrame) -> str:
    """The check as a Markdown table, with a line per strategy below the floor on validation."""
    lines = [
        "| strategy | round chosen (of) | validation AUC: chosen / floor (Δ) "
        "| test AUC [95% CI] | floor test AUC [95% CI] | Δ test vs floor [95% CI] | wall (s) |",
        "|---|---:|---|---|---|---|---:|",
    ]
    for r in table.itertuples(index=False):
        chosen = "0 (the floor)" if r.selected_round == 0 else str(r.selected_round)
        lines.append(
            f"| {r.strategy} | {chosen} ({r.rounds}) "
            f"| {r.validation_auc:.4f} / {r.floor_validation_auc:.4f} ({r.validation_delta:+.4f}) "
            f"| {_interval(r.test_auc, r.test_auc_se)} "
            f"| {_interval(r.floor_test_auc, r.floor_test_auc_se)} "
            f"| {r.test_delta:+.4f} [{r.test_delta_low:+.4f}, {r.test_delta_high:+.4f}] "
            f"| {r.wall_s:.0f} |"
        )
    below = table[table["below_floor"]]
    lines.append("")
    if below.empty:
        lines.append("No chosen model is below the floor on validation.")
    for r in below.itertuples(index=False):
        lines.append(
            f"**{r.strategy} is below the floor on validation** ({r.validation_auc:.4f} < "
            f"{r.floor_validation_auc:.4f}): a bug (the floor is a candidate, round 0)."
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write ``floor_check.tsv`` and ``floor_check.md``; returns 1 when a model is below."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="the workflow's folder")
    parser.add_argument("--strategies", required=True, help="comma-separated, as trained")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    table = floor_check_table(args.workdir, strategies)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "floor_check.tsv", sep="\t", index=False, float_format="%.5f")
    markdown = to_markdown(table)
    (args.out / "floor_check.md").write_text(markdown)
    print(markdown)
    return int(bool(table["below_floor"].any()))


if __name__ == "__main__":
    raise SystemExit(main())
