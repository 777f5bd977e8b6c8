"""``pipelines/compare_strategies.py`` on metrics trained on the tiny synthetic federation."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.config import validate_config
from rvfedprs.evaluation import evaluate_models, load_truth
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import load_federation
from rvfedprs.genomic.task import training_config
from rvfedprs.provenance import write_metrics
from rvfedprs.run import client_clusters, write_predictions
from rvfedprs.strategies import strategy_from_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _federation_fixtures import write_federation  # noqa: E402
from _genomic_runs import run_inprocess  # noqa: E402

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def load(name):
    spec = importlib.util.spec_from_file_location(f"pipeline_{name}", PIPELINES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """FedCE and FedAvg trained for a few rounds; their metrics.json and a benchmark file each."""
    root = tmp_path_factory.mktemp("fed")
    paths = write_federation(root, n_clients=6, samples_per_client=200, seed=3)
    config = validate_config(
        {
            "train": {"rounds": 3, "local_epochs": 2, "batch_size": 32, "lr": 0.1, "seed": 5},
            "model": {"rare_hidden": [8], "common_hidden": [4]},
            "fedce": {"n_clusters": 3},
        }
    )
    federation = load_federation(paths["data"])
    truth = load_truth(paths["truth"], paths["samples"])
    out = {"metrics": [], "benchmarks": [], "records": [], "predictions": [], "paths": paths}
    for k, name in enumerate(("fedce", "fedavg")):
        strategy = strategy_from_config(name, config)
        run_inprocess(
            federation,
            strategy,
            rounds=3,
            model_config=config["model"],
            training=training_config(config, federation),
            random_seed=5,
        )
        record = evaluate_models(
            strategy.parameters_for,
            client_clusters(strategy, federation.client_ids),
            federation.test,
            federation.variant_keys,
            config["model"],
            truth=truth,
            score_clusters=strategy.forms_clusters,
        )
        record = {"strategy": name, "seed": 5, **record, "history": []}
        folder = root / "train" / name
        out["metrics"].append(write_metrics(folder, record))
        bench = folder / "benchmark.tsv"
        bench.write_text(f"s\th:m:s\tmax_rss\n{12.5 + k}\t0:00:12\t100\n")
        out["benchmarks"].append(bench)
        out["records"].append(json.loads((folder / "metrics.json").read_text()))
        out["predictions"].append(write_predictions(folder, strategy, federation, config))
    return out


def test_compare_writes_table_markdown_and_figure(trained, tmp_path):
    compare = load("compare_strategies")
    table = compare.main(
        trained["metrics"],
        trained["benchmarks"],
        tmp_path / "c.csv",
        tmp_path / "c.md",
        tmp_path / "c.png",
    )
    assert list(table["strategy"]) == ["fedce", "fedavg"]
    written = pd.read_csv(tmp_path / "c.csv")
    assert list(written.columns) == list(compare.COLUMNS)
    for row, record in zip(written.itertuples(index=False), trained["records"], strict=True):
        aucs = np.array([v for v in record["client_auc"].values() if v is not None])
        assert row.auc == pytest.approx(record["auc"])
        assert row.carrier_auc == pytest.approx(record["carrier_auc"])
        assert row.n_carriers == record["n_carriers"]
        assert row.client_auc_mean == pytest.approx(aucs.mean())
        assert row.client_auc_std == pytest.approx(aucs.std())
        expected_ari = float("nan") if record["ari"] is None else record["ari"]
        assert row.ari == pytest.approx(expected_ari, nan_ok=True)
        assert row.n_clusters == len(set(record["clusters"].values()))
    assert list(written["wall_s"]) == [12.5, 13.5]
    # FedAvg forms no clusters: one cluster reported, ARI not applicable (empty, not 0)
    assert written.loc[1, "n_clusters"] == 1 and np.isnan(written.loc[1, "ari"])
    assert record["ari"] is None
    markdown = (tmp_path / "c.md").read_text().splitlines()
    assert len(markdown) == 2 + 2 and markdown[2].startswith("| fedce |")
    assert f"{record['auc']:.3f}" in markdown[3]
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_without_benchmarks_reports_no_wall_time(trained, tmp_path):
    compare = load("compare_strategies")
    table = compare.main(
        trained["metrics"][:1], None, tmp_path / "c.csv", tmp_path / "c.md", tmp_path / "c.png"
    )
    assert np.isnan(table.loc[0, "wall_s"])
    assert "| – |" in (tmp_path / "c.md").read_text()


def test_compare_rejects_incomplete_metrics(trained, tmp_path):
    compare = load("compare_strategies")
    bad = tmp_path / "metrics.json"
    bad.write_text(json.dumps({"strategy": "fedce", "auc": 0.6}))
    with pytest.raises(InputDataError, match=r"metrics.json lacks metrics \['auprc'"):
        compare.main([bad], None, tmp_path / "c.csv", tmp_path / "c.md", tmp_path / "c.png")


def test_compare_rejects_a_file_that_is_not_a_benchmark(trained, tmp_path):
    compare = load("compare_strategies")
    bench = tmp_path / "bench.tsv"
    bench.write_text("seconds\n3\n")
    with pytest.raises(InputDataError, match="bench.tsv is not a Snakemake benchmark"):
        compare.main(
            trained["metrics"][:1],
            [bench],
            tmp_path / "c.csv",
            tmp_path / "c.md",
            tmp_path / "c.png",
        )


def test_compare_with_predictions_adds_intervals_floor_oracle_and_clusters(trained, tmp_path):
    from sklearn.metrics import roc_auc_score

    compare = load("compare_strategies")
    paths = trained["paths"]
    federation = load_federation(paths["data"])
    ids = [s for c in sorted(federation.test) for s in federation.test[c].sample_ids]
    rng = np.random.default_rng(0)
    genetic = pd.DataFrame({"sample_id": ids, "genetic_common": rng.normal(size=len(ids)),
                            "genetic_rare": 0.0})  # fmt: skip
    genetic.to_csv(paths["truth"].parent / "genetic_values.tsv", sep="\t", index=False)
    table = compare.main(
        trained["metrics"], trained["benchmarks"], tmp_path / "c.csv", tmp_path / "c.md",
        tmp_path / "c.png", predictions=trained["predictions"], data=paths["data"],
        truth=paths["truth"], samples=paths["samples"],
    )  # fmt: skip
    assert list(table["strategy"]) == ["fedce", "fedavg", compare.FLOOR, compare.ORACLE]
    y = np.concatenate([federation.test[c].y for c in sorted(federation.test)])
    prs = np.concatenate([federation.test[c].prs for c in sorted(federation.test)])
    rows = table.set_index("strategy")
    assert rows.loc[compare.FLOOR, "auc"] == pytest.approx(roc_auc_score(y, prs))
    oracle = genetic.set_index("sample_id").loc[ids, "genetic_common"].to_numpy()
    assert rows.loc[compare.ORACLE, "auc"] == pytest.approx(roc_auc_score(y, oracle))
    for record in trained["records"]:  # the predictions reproduce rvfedprs evaluate's AUCs
        row = rows.loc[record["strategy"]]
        assert row["auc"] == pytest.approx(record["auc"])
        assert row["carrier_auc"] == pytest.approx(record["carrier_auc"])
        assert row["auc_ci_low"] < row["auc"] < row["auc_ci_high"]
        share = (row["auc"] - rows.loc[compare.FLOOR, "auc"]) / (
            rows.loc[compare.ORACLE, "auc"] - rows.loc[compare.FLOOR, "auc"]
        )
        assert row["signal_share"] == pytest.approx(share)
    assert {"carrier_auc_0", "carrier_auc_1", "carrier_auc_2"} <= set(table.columns)
    text = (tmp_path / "c.md").read_text()
    assert "prs_only (floor)" in text and "oracle (ceiling)" in text
    assert "Carrier AUC per true cluster" in text and "DeLong 95%" in text
