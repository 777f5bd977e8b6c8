"""Tables II–V: t-intervals against scipy, per-seed headline, Markdown/CSV output."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rvfedprs.evaluation.report.runs import load_mia, load_runs
from rvfedprs.evaluation.report.tables import (
    format_ci,
    headline,
    mean_ci,
    table_ii,
    table_iv,
    table_v,
    write_table,
)
from rvfedprs.exceptions import InputDataError

AUC = {
    "centralized": [0.80, 0.82, 0.78],
    "fedavg": [0.60, 0.62, 0.61],
    "fedce": [0.79, 0.80, 0.70],
}


def test_mean_ci_matches_scipy_t_interval():
    x = [0.61, 0.64, 0.58, 0.66, 0.60]
    mean, half, n = mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert n == 5 and mean == pytest.approx(np.mean(x))
    assert (mean - half, mean + half) == pytest.approx((lo, hi))
    assert mean_ci([0.5, float("nan")])[1] != mean_ci([0.5, float("nan")])[1]  # NaN: one value
    assert format_ci(0.71234, 0.0123) == "0.712 ± 0.012"
    assert format_ci(float("nan"), 0.1) == "—"


def _write_runs(root):
    for strategy, values in AUC.items():
        for seed, auc in enumerate(values):
            d = root / strategy / f"seed{seed}"
            d.mkdir(parents=True)
            record = {
                "strategy": strategy, "seed": seed, "auc": auc, "auprc": auc / 3,
                "carrier_auc": auc + 0.05, "client_auc": {"c1": auc, "c2": auc - 0.1},
                "client_auc_mean": auc - 0.05, "client_auc_std": 0.05, "history": [],
            }  # fmt: skip
            (d / "metrics.json").write_text(json.dumps(record))
            rows = [{"client": "c1", "attack": "loss", "subset": s, "advantage": auc / 10 + i,
                     "accuracy_advantage": 0.0, "auc": 0.5, "tpr_at_0.01": 0.01,
                     "tpr_at_0.001": 0.0}
                    for i, s in enumerate(["general", "carriers"])]  # fmt: skip
            (d / "mia.json").write_text(
                json.dumps({"strategy": strategy, "seed": seed, "rows": rows})
            )


def test_tables_from_run_folders(tmp_path):
    _write_runs(tmp_path)
    runs = load_runs(tmp_path)
    assert len(runs) == 9 and set(runs["experiment"]) == {"main"}
    t2 = table_ii(runs)
    assert list(t2["strategy"]) == ["centralized", "fedavg", "fedce"]  # paper order
    row = t2.set_index("strategy").loc["fedce"]
    mean, half, _ = mean_ci(AUC["fedce"])
    assert row["auc_mean"] == pytest.approx(mean) and row["auc_ci"] == pytest.approx(half)
    t4 = table_iv(runs)
    assert t4.set_index("strategy").loc["fedavg", "client_auc_mean_mean"] == pytest.approx(
        np.mean(AUC["fedavg"]) - 0.05
    )
    t5 = table_v(load_mia(tmp_path))
    gen = t5[(t5.subset == "general")].set_index("strategy")
    assert gen.loc["fedavg", "advantage_mean"] == pytest.approx(np.mean(AUC["fedavg"]) / 10)
    car = t5[(t5.subset == "carriers")].set_index("strategy")
    assert car.loc["fedavg", "advantage_mean"] == pytest.approx(np.mean(AUC["fedavg"]) / 10 + 1)

    md, csv = write_table(t2, tmp_path / "out", "table2", title="Table II", note="n.b.")
    text = md.read_text()
    assert "| RV-FedPRS (FedCE) |" in text and format_ci(row["auc_mean"], row["auc_ci"]) in text
    assert pd.read_csv(csv)["auc_mean"].tolist() == pytest.approx(t2["auc_mean"].tolist())


def test_headline_is_paired_by_seed(tmp_path):
    _write_runs(tmp_path)
    h = headline(load_runs(tmp_path))
    shares = [(f - a) / (c - a) for c, a, f in zip(*AUC.values(), strict=True)]
    assert h["shares"] == pytest.approx(dict(enumerate(shares)))
    assert h["share_mean"] == pytest.approx(np.mean(shares))
    means = {k: np.mean(v) for k, v in AUC.items()}
    expected = (means["fedce"] - means["fedavg"]) / (means["centralized"] - means["fedavg"])
    assert h["share_of_means"] == pytest.approx(expected)


def test_load_runs_errors(tmp_path):
    with pytest.raises(InputDataError, match="no metrics.json found under"):
        load_runs(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"auc": 0.5}))
    with pytest.raises(InputDataError, match=r"lacks keys \['strategy', 'seed'\]"):
        load_runs(tmp_path)
