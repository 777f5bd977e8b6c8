"""The protocol driver (tiny run on the synthetic federation) and `rvfedprs report`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from _federation_fixtures import write_federation

from rvfedprs.cli import main as cli_main

DRIVER = Path(__file__).resolve().parents[1] / "simulations" / "rvfedprs_paper" / "run.py"


def _driver():
    spec = importlib.util.spec_from_file_location("rvfedprs_paper_run", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    paths = write_federation(root, n_clients=4, n_clusters=2, samples_per_client=80, seed=3)
    out = root / "out"
    argv = [
        "--quick", "--data", str(paths["data"]), "--samples", str(paths["samples"]),
        "--truth", str(paths["truth"]), "--out", str(out), "--seeds", "1", "--rounds", "1",
        "--strategies", "centralized,fedavg,fedce", "--no-privacy", "--no-sensitivity",
        "--selected", "centralized,fedavg,fedce", "--validation-fraction", "0.2",
    ]  # fmt: skip
    assert _driver().main(argv) == 0
    return paths, out, argv


def test_driver_writes_runs_tables_and_figures(tiny_run):
    _, out, _ = tiny_run
    for strategy in ("centralized", "fedavg", "fedce"):
        run = out / "runs" / "main" / strategy / "seed0"
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["strategy"] == strategy and 0 <= metrics["auc"] <= 1
        mia = json.loads((run / "mia.json").read_text())
        assert {(r["attack"], r["subset"]) for r in mia["rows"]} == {
            (a, s) for a in ("loss", "lira_offline") for s in ("general", "carriers")
        }
    bloom = json.loads((out / "runs/main/fedce/seed0/bloom_attack.json").read_text())
    plain = [r for r in bloom["rows"] if r["hashing"] == "plain"]
    assert plain and all(r["tpr"] == 1.0 for r in plain)
    report = out / "report"
    for name in ("table2_performance", "table3_carriers", "table4_fairness", "table5_mia"):
        assert (report / f"{name}.md").is_file() and (report / f"{name}.csv").is_file()
    t2 = pd.read_csv(report / "table2_performance.csv")
    assert set(t2["strategy"]) == {"centralized", "fedavg", "fedce"}
    for fig in ("roc", "client_auc", "jaccard", "mia_roc"):
        assert (report / "figures" / f"{fig}.png").stat().st_size > 1000
    assert "driver:" in (out / "progress.log").read_text()


def test_selected_runs_train_without_validation_samples_and_are_tabulated(tiny_run):
    _, out, _ = tiny_run
    for strategy in ("centralized", "fedavg", "fedce"):
        run = out / "runs" / "selected" / strategy / "seed0"
        metrics = json.loads((run / "metrics.json").read_text())
        # one round: the round, or the floor the run started from (round 0, issue 29)
        assert metrics["experiment"] == "selected" and metrics["best_round"] in (0, 1)
        if metrics["best_round"] == 1:
            assert metrics["history"][0]["validation_auc"] == metrics["best_validation_auc"]
        assert metrics["validation_fraction"] == 0.2
        # same test individuals as the main run, different (smaller) training data
        main = pd.read_parquet(out / "runs" / "main" / strategy / "seed0" / "predictions.parquet")
        sel = pd.read_parquet(run / "predictions.parquet")
        assert sel["sample_id"].tolist() == main["sample_id"].tolist()
        assert 0 < metrics["n_validation"] < 0.3 * 4 * 80
    table = pd.read_csv(out / "report" / "table2_selected_round.csv")
    assert set(table["strategy"]) == {"centralized", "fedavg", "fedce"}
    assert table["best_round_mean"].between(0, 1).all()
    assert "stratified 20%" in (out / "report" / "table2_selected_round.md").read_text()
    head = json.loads((out / "report" / "headline.json").read_text())
    assert head["selected"]["n_seeds"] == 1


def test_driver_resumes_without_retraining(tiny_run):
    _, out, argv = tiny_run
    metrics = out / "runs" / "main" / "fedavg" / "seed0" / "metrics.json"
    before = metrics.stat().st_mtime_ns
    assert _driver().main(argv) == 0
    assert metrics.stat().st_mtime_ns == before
    assert "skip" in (out / "progress.log").read_text()


def test_sharded_driver_calls_split_the_runs_between_them(tiny_run, tmp_path):
    paths, _, _ = tiny_run
    out = tmp_path / "out"
    argv = [
        "--quick", "--data", str(paths["data"]), "--out", str(out), "--seeds", "1",
        "--rounds", "1", "--strategies", "centralized,fedavg,fedce", "--no-mia",
        "--no-privacy", "--no-sensitivity", "--no-selected",
    ]  # fmt: skip

    def done() -> set[str]:
        return {p.parts[-3] for p in (out / "runs" / "main").glob("*/seed0/metrics.json")}

    assert _driver().main([*argv, "--shard", "1/2"]) == 0
    assert done() == {"fedavg"}
    assert _driver().main([*argv, "--shard", "0/2"]) == 0
    assert done() == {"centralized", "fedavg", "fedce"}


@pytest.mark.parametrize("shard", ["2/2", "a/2", "1"])
def test_bad_shard_is_named(shard, capsys):
    with pytest.raises(SystemExit):
        _driver().parse_args(["--out", "x", "--shard", shard])
    assert f"--shard {shard!r}" in capsys.readouterr().err


def test_report_command(tiny_run, tmp_path):
    paths, out, _ = tiny_run
    config = tmp_path / "c.yaml"
    config.write_text(
        f"evaluate:\n  samples: {paths['samples']}\n  truth: {paths['truth']}\n"
        "report:\n  digits: 2\n"
    )
    assert cli_main(["report", "--config", str(config), "--runs", str(out / "runs"),
                     "--out", str(tmp_path / "rep")]) == 0  # fmt: skip
    text = (tmp_path / "rep" / "table2_performance.md").read_text()
    assert "FedAvg" in text and "Headline" in text
    assert (tmp_path / "rep" / "figures" / "jaccard.png").is_file()


def test_report_command_without_runs_fails_clearly(tmp_path, capsys):
    assert cli_main(["report", "--runs", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no metrics.json found under" in capsys.readouterr().err


def test_sensitivity_tables_per_factor_average_the_seeds(tmp_path):
    from rvfedprs.config import load_config
    from rvfedprs.evaluation.report import build_report

    runs = tmp_path / "runs"
    values = {("top_k", "50"): [0.61, 0.65], ("top_k", "200"): [0.70, 0.72],
              ("bloom", "2000/0.1"): [0.66, 0.60]}  # fmt: skip
    for (factor, value), aucs in values.items():
        for seed, auc in enumerate(aucs):
            run = runs / "sensitivity" / f"{factor}={value}".replace("/", "_") / f"seed{seed}"
            run.mkdir(parents=True)
            (run / "metrics.json").write_text(json.dumps({
                "strategy": "fedce", "seed": seed, "experiment": "sensitivity",
                "label": f"{factor}={value}", "factor": factor, "value": value, "auc": auc,
                "carrier_auc": auc + 0.1, "ari": 1.0, "client_auc": {}}))  # fmt: skip
    config = load_config(None, overrides={"report": {"plots": False}})
    build_report(runs, tmp_path / "report", config)
    top_k = pd.read_csv(tmp_path / "report" / "sensitivity" / "top_k.csv")
    assert set(top_k["label"]) == {"top_k=50", "top_k=200"}
    for label, aucs in (("top_k=50", [0.61, 0.65]), ("top_k=200", [0.70, 0.72])):
        row = top_k[top_k["label"] == label].iloc[0]
        assert row["auc_mean"] == pytest.approx(sum(aucs) / 2)
        assert row["carrier_auc_mean"] == pytest.approx(sum(aucs) / 2 + 0.1)
    bloom = pd.read_csv(tmp_path / "report" / "sensitivity" / "bloom.csv")
    assert bloom["label"].tolist() == ["bloom=2000/0.1"] and bloom["n_seeds"].tolist() == [2]
    assert "h2_rare.py" in (tmp_path / "report" / "sensitivity.md").read_text()


def test_table_v_is_recomputed_from_saved_scores_with_the_corrected_advantage(tmp_path):
    """An old mia.json stored max |TPR − FPR| (a reversed attack counted as 1); the scores
    beside it give the advantage max (TPR − FPR) = 0."""
    import numpy as np

    from rvfedprs.config import load_config
    from rvfedprs.evaluation.report import build_report

    member = np.repeat([True, False], 50)
    for strategy, keep_scores in (("fedavg", True), ("fedce", False)):
        run = tmp_path / "runs" / "main" / strategy / "seed0"
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(json.dumps(
            {"strategy": strategy, "seed": 0, "auc": 0.6, "client_auc": {"a": 0.6}}))  # fmt: skip
        old = [{"client": "a", "attack": "lira", "subset": "general", "advantage": 1.0,
                "accuracy_advantage": 0.0, "auc": 0.0, "tpr_at_0.01": 0.0}]  # fmt: skip
        (run / "mia.json").write_text(json.dumps({"strategy": strategy, "seed": 0, "rows": old}))
        if keep_scores:
            np.savez(run / "mia_scores.npz", a__lira=-member.astype(float), a__is_member=member,
                     a__is_carrier=np.zeros(100, bool), a__general=np.ones(100, bool))  # fmt: skip
    config = load_config(None, overrides={"report": {"plots": False}})
    build_report(tmp_path / "runs", tmp_path / "report", config)
    t5 = pd.read_csv(tmp_path / "report" / "table5_mia.csv")
    general = t5[(t5["subset"] == "general") & (t5["cluster"] == "all")].set_index("strategy")
    assert general.loc["fedavg", "attack"] == "lira_offline"
    assert general.loc["fedavg", "advantage_mean"] == 0.0  # not 1
    assert general.loc["fedavg", "pooled_nonmembers"] == 50
    assert general.loc["fedce", "advantage_mean"] == 1.0  # no scores: as recorded, and flagged
    text = (tmp_path / "report" / "table5_mia.md").read_text()
    assert "1 audited run(s) kept no scores" in text and "not resolvable (50" in text


@pytest.fixture(scope="module")
def privacy_run(tmp_path_factory):
    """The driver's privacy stage on 6 clients in 2 clusters of 3 (secure sums need ≥ 3)."""
    root = tmp_path_factory.mktemp("privacy")
    paths = write_federation(root, n_clients=6, n_clusters=2, samples_per_client=60, seed=5)
    config = root / "c.yaml"
    config.write_text("mia:\n  attacks: [loss]\n  targets: all\ndp:\n  epsilon_targets: [4.0]\n")
    out = root / "out"
    argv = [
        "--config", str(config), "--data", str(paths["data"]), "--samples", str(paths["samples"]),
        "--truth", str(paths["truth"]), "--out", str(out), "--seeds", "1", "--rounds", "2",
        "--strategies", "", "--no-selected", "--no-sensitivity",
    ]  # fmt: skip
    assert _driver().main(argv) == 0
    return out


def test_privacy_table_has_secure_aggregation_rows_and_the_channels_each_protects(privacy_run):
    out = privacy_run
    labels = ["plain", "keyed", "secagg", "dp_eps4", "secagg_dp_eps4"]
    records = {
        label: json.loads((out / "runs/privacy" / label / "seed0/metrics.json").read_text())
        for label in labels
    }
    for label, record in records.items():
        assert record["secure_aggregation"] == label.startswith("secagg"), label
        assert 0 <= record["mia_loss_advantage"] <= 1
    # the secure runs really aggregated sums: the history names the sums and who is in them
    secure_history = records["secagg"]["history"][-1]["secagg"]
    assert sorted(secure_history) == ["backbone", "cluster-0", "cluster-1"]
    assert sorted(len(m) for k, m in secure_history.items() if k != "backbone") == [3, 3]
    assert "secagg" not in records["keyed"]["history"][-1]
    # without SecAgg the server reads every carried variant off each client's own update
    assert records["keyed"]["update_channel_tpr"] == 1.0
    assert records["keyed"]["update_channel_fpr"] == 0.0
    # with it, it sees only cluster sums: a variant carried by one member is hidden in the sum
    assert records["secagg"]["update_channel_fpr"] > 0.0
    channels = json.loads((out / "runs/privacy/secagg/seed0/channels.json").read_text())
    summed = {r["n_summed"] for r in channels["rows"]
              if r["channel"] == "update" and r["secure_aggregation"]}  # fmt: skip
    assert summed == {3}
    table = pd.read_csv(out / "report" / "privacy_utility.csv")
    assert table["label"].tolist() == ["plain", "keyed", "dp_eps4", "secagg", "secagg_dp_eps4"]
    rows = table.set_index("label")
    assert rows.loc["secagg", "secure_aggregation"] and not rows.loc["keyed", "secure_aggregation"]
    assert rows.loc["plain", "hashing"] == "plain" and rows.loc["secagg", "hashing"] == "keyed"
    assert rows.loc["secagg", "update_channel_tpr_mean"] == records["secagg"]["update_channel_tpr"]
    assert rows.loc["plain", "channels"] == (
        "updates: each client's, in clear; filters: plain, server-testable; model: unprotected"
    )
    assert rows.loc["secagg", "channels"].startswith("updates: sums of ≥ min_clients only;")
    eps = rows.loc["secagg_dp_eps4", "epsilon_mean"]
    assert 3.0 < eps <= 4.0 + 1e-6
    assert rows.loc["secagg_dp_eps4", "channels"] == (
        f"updates: sums of ≥ min_clients only, DP ε≈{eps:.3g}; filters: keyed (outside ε); "
        f"model: DP ε≈{eps:.3g}"
    )
    md = (out / "report" / "privacy_utility.md").read_text()
    assert "outside the DP ε" in md and "secagg_dp_eps4" in md
    assert (out / "report" / "figures" / "privacy_utility.png").stat().st_size > 1000
    labelled = pd.read_csv(out / "report" / "channels.csv")
    assert set(labelled["label"]) == set(labels)
