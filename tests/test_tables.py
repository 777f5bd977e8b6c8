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
    table_signal,
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


def _runs_frame(auc_by_strategy, **extra):
    rows = [
        {"strategy": s, "seed": i, "experiment": "main", "auc": a, **extra}
        for s, values in auc_by_strategy.items()
        for i, a in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_headline_is_undefined_when_the_denominators_interval_reaches_zero():
    # the demo's situation: Central barely above FedAvg, noisy over seeds
    runs = _runs_frame({"centralized": [0.60, 0.58, 0.63], "fedavg": [0.59, 0.60, 0.60],
                        "fedce": [0.61, 0.62, 0.60]})  # fmt: skip
    h = headline(runs)
    gaps = [0.01, -0.02, 0.03]
    mean, half, _ = mean_ci(gaps)
    assert h["gain_mean"] == pytest.approx(mean) and h["gain_ci"] == pytest.approx(half)
    assert not h["defined"] and np.isnan(h["share_mean"]) and np.isnan(h["share_of_means"])
    assert "reaches 0" in h["reason"]
    below = headline(_runs_frame({"centralized": [0.50, 0.51, 0.50], "fedavg": [0.60, 0.61, 0.60],
                                  "fedce": [0.6, 0.6, 0.6]}))  # fmt: skip
    assert not below["defined"] and "below FedAvg" in below["reason"]
    one = headline(_runs_frame({"centralized": [0.8], "fedavg": [0.6], "fedce": [0.7]}))
    assert not one["defined"] and "fewer than 2 seeds" in one["reason"]
    assert one["shares"] == {0: pytest.approx(0.5)}  # the per-seed value is still recorded


def test_table_iv_corrects_the_spread_for_sampling_noise():
    auc = {"c1": 0.70, "c2": 0.76, "c3": 0.64, "c4": 0.70}
    se = {"c1": 0.02, "c2": 0.03, "c3": 0.02, "c4": 0.04}
    runs = _runs_frame({"fedavg": [0.7]}, client_auc_mean=0.7, client_auc_std=0.04)
    runs["client_auc"], runs["client_auc_se"] = [auc], [se]
    t4 = table_iv(runs).iloc[0]
    s2 = np.var(list(auc.values()), ddof=1)
    mean_se2 = np.mean(np.square(list(se.values())))
    assert t4["client_auc_sd_corrected_mean"] == pytest.approx(np.sqrt(s2 - mean_se2))
    assert t4["client_auc_mean_se_mean"] == pytest.approx(np.sqrt(mean_se2))
    runs["client_auc_se"] = [{c: 0.1 for c in auc}]  # noise larger than the spread: floored
    assert table_iv(runs).iloc[0]["client_auc_sd_corrected_mean"] == 0.0


def test_signal_share_table():
    runs = _runs_frame({"fedce": [0.70, 0.72], "fedavg": [0.65, 0.66]})
    runs["prs_only_auc"], runs["oracle_auc"] = 0.60, 0.80
    table = table_signal(runs).set_index("strategy")
    assert table.loc["fedce", "signal_share_mean"] == pytest.approx(np.mean([0.5, 0.6]))
    assert table.loc["fedavg", "signal_share_mean"] == pytest.approx(np.mean([0.25, 0.3]))
    assert table_signal(_runs_frame({"fedce": [0.7]})).empty  # no reference AUCs recorded


def test_table_v_reports_pooled_low_fpr_rates_only_where_resolvable():
    rows = pd.DataFrame(
        [{"strategy": "fedavg", "seed": s, "client": c, "attack": "loss", "subset": "general",
          "cluster": k, "advantage": 0.1 + 0.01 * s, "accuracy_advantage": 0.0, "auc": 0.55}
         for s in range(2) for c, k in (("a", "1"), ("b", "2"))]
    )  # fmt: skip
    pooled = pd.DataFrame(
        [{"strategy": "fedavg", "attack": "loss", "subset": "general", "cluster": k,
          "advantage": 0.12, "auc": 0.56, "n_nonmembers": n, "tpr_at_0.01": t,
          "tpr_at_0.001": float("nan")}
         for k, n, t in (("all", 4000, 0.031), ("1", 800, float("nan")), ("2", 3200, 0.02))]
    )  # fmt: skip
    table = table_v(rows, pooled).set_index("cluster")
    assert table.loc["all", "advantage_mean"] == pytest.approx(0.105)
    assert table.loc["1", "advantage_mean"] == pytest.approx(0.105)
    assert table.loc["all", "TPR@0.01 (pooled)"] == "0.031"
    assert table.loc["1", "TPR@0.01 (pooled)"].startswith("not resolvable (800 non-members")
    assert table.loc["all", "TPR@0.001 (pooled)"].startswith("not resolvable (4,000")
