"""The benchmark protocol (SPEC §12): grids, tuning, references, outcomes, paired analysis."""

import json
import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from rvfedprs.config import deep_merge, validate_config
from rvfedprs.evaluation.paired import delong_ci, delong_test
from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.genomic.data import load_federation
from rvfedprs.genotypes.writers import BedWriter
from rvfedprs.protocol import configurations, run_trial, three_way_split, tune
from rvfedprs.protocol.analysis import (
    BEST_BASELINE,
    best_baselines,
    bootstrap_deltas,
    forest_plot,
    paired_deltas,
)
from rvfedprs.protocol.grids import (
    GLM_PATHS,
    GLMS,
    LOGISTIC,
    METHOD_AXES,
    SHARED_AXES,
    configuration_overrides,
)
from rvfedprs.protocol.outcomes import outcome_table, predictions_frame
from rvfedprs.protocol.references import (
    design_matrix,
    genetic_values,
    oracle_scores,
    prs_only_scores,
)
from rvfedprs.strategies import strategy_from_config
from tests._federation_fixtures import write_federation

BASE = validate_config({"train": {"progress": False}, "model": {"rare_hidden": [8]}})


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("protocol")
    info = write_federation(root, n_clients=4, n_clusters=2, samples_per_client=150,
                            covariates=("age",))  # fmt: skip
    return info


@pytest.fixture(scope="module")
def data(cohort):
    return three_way_split(load_federation(cohort["data"]), 0.25, random_seed=3)


# --- grids --------------------------------------------------------------------------------------
def test_every_method_tries_the_same_optimiser_settings():
    shared = list(SHARED_AXES)
    first = None
    for method in METHOD_AXES:
        if method == LOGISTIC or method in GLMS:
            continue
        points = [{k: c[k] for k in shared} for c in configurations(method, 6, random_seed=5)]
        first = first or points
        assert points == first, method
        assert len({json.dumps(c, sort_keys=True) for c in configurations(method, 6)}) == 6


def test_grids_are_balanced_and_prefix_consistent():
    configs = configurations("fedprox", 8)
    mu = pd.Series([c["train.proximal_mu"] for c in configs]).value_counts()
    assert sorted(mu.tolist()) == [2, 2, 2, 2]
    for budget in (4, 6, 8, 12):
        for axis in SHARED_AXES:
            values = [c[axis] for c in configurations("fedavg", budget)]
            counts = pd.Series(values).value_counts().reindex(SHARED_AXES[axis], fill_value=0)
            limit = 1 if axis == "train.lr" else 2
            assert counts.max() - counts.min() <= limit, (budget, axis)
    for method in set(METHOD_AXES) - set(GLMS):
        assert configurations(method, 4) == configurations(method, 6)[:4], method


def test_a_glm_trial_is_its_whole_penalty_path_and_its_trials_spread_the_other_knobs():
    path = GLM_PATHS["fedglm"]
    assert configurations("fedglm", 3) == [path]  # burdens or dosages: one trial
    top_k = configurations("fedglm", 3, glm_features="burden+top_k")
    assert sorted(c["fedglm.top_k"] for c in top_k) == [10, 30, 100]
    assert all(c["fedglm.l2"] == path["fedglm.l2"] for c in top_k)
    configs = configurations("fedce_glm", 6, random_seed=5, glm_features="top_k")
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs) <= 6
    for axis, values in METHOD_AXES["fedce_glm"].items():  # every value of every knob tried
        assert {c[axis] for c in configs} == set(values), axis
    assert all(c["fedglm.l2_cluster"] == [300.0, 30.0, 3.0] for c in configs)
    plain = configurations("fedce_glm", 6, random_seed=5, glm_features="burden")
    assert all(set(c) == {"fedce.n_clusters", "fedglm.l2", "fedglm.l2_cluster"} for c in plain)
    assert sorted(c["fedce.n_clusters"] for c in plain) == [2, 3, 4]  # duplicates dropped
    for method in GLMS:  # a larger budget keeps what a smaller one tried
        for features in ("burden", "top_k"):
            small = configurations(method, 2, glm_features=features)
            assert configurations(method, 6, glm_features=features)[: len(small)] == small


def test_clustered_fl_thresholds_keep_eps2_above_eps1():
    for configuration in configurations("clustered", 12):
        ratio = configuration["train.cfl_eps2"] / configuration["train.cfl_eps1"]
        assert ratio == pytest.approx(1.5) or ratio == pytest.approx(2) or ratio == pytest.approx(3)


def test_every_configuration_builds_its_strategy():
    for method in METHOD_AXES:
        if method == LOGISTIC:
            continue
        for configuration in configurations(method, 6):
            config = validate_config(deep_merge(BASE, configuration_overrides(configuration)))
            strategy = strategy_from_config(method, config)
            if method == "fedce":
                assert strategy.spec.capacity >= strategy.top_k


def test_grid_errors_name_the_problem():
    with pytest.raises(ConfigError, match=r"exceeds the 24 points of the shared grid"):
        configurations("fedavg", 25)
    with pytest.raises(ConfigError, match=r"no tuning grid for 'fedce_oracle' \(it takes 'fedce'"):
        configurations("fedce_oracle", 2)
    with pytest.raises(ConfigError, match=r"'lr' is not 'section.option'"):
        configuration_overrides({"lr": 0.1})


# --- tuning ------------------------------------------------------------------------------------
def test_three_way_split_hides_the_test_split(cohort, data):
    federation = load_federation(cohort["data"])
    assert data.fit.test == {}
    for c in federation.client_ids:
        assert data.fit.train[c].n_samples + data.validation[c].n_samples == (
            federation.train[c].n_samples
        )
        np.testing.assert_array_equal(data.test[c].sample_ids, federation.test[c].sample_ids)
        assert not set(data.validation[c].sample_ids) & set(data.fit.train[c].sample_ids)


def test_early_stopping_ends_a_run_after_patience_rounds(data):
    trial, _ = run_trial(data, "fedavg", {"train.lr": 0.2}, base_config=BASE, max_rounds=40,
                         patience=2, random_seed=1)  # fmt: skip
    assert trial.rounds_run == len(trial.validation_aucs)
    assert trial.rounds_run < 40 and trial.rounds_run == trial.best_round + 2
    if trial.best_round == 0:  # the floor the run started from beat every round (issue 29)
        assert trial.validation_auc > max(trial.validation_aucs)
    else:
        assert trial.validation_auc == max(trial.validation_aucs)
        assert trial.validation_aucs.index(trial.validation_auc) + 1 == trial.best_round


def _tune(data, out, method="fedavg", budget=3, base=BASE, **kw):
    return tune(data, method, out=out, base_config=base, data_key="cohort", max_rounds=4,
                patience=2, random_seed=1, budget=budget, **kw)  # fmt: skip


def _trial_files(out):
    return {p: p.stat().st_mtime_ns for p in out.rglob("trial.json")}


def test_tune_chooses_the_best_validation_auc_and_resumes(data, tmp_path):
    tuned = _tune(data, tmp_path)
    assert tuned.chosen.validation_auc == max(t.validation_auc for t in tuned.trials)
    table = pd.read_csv(tmp_path / "fedavg" / "tuning.tsv", sep="\t")
    assert table["chosen"].sum() == 1 and len(table) == 3
    files = _trial_files(tmp_path)
    assert len(files) == 3
    first = tuned.fitted.predict(data.validation)
    again = _tune(data, tmp_path)  # read back; the chosen trial re-run for its models
    assert _trial_files(tmp_path) == files
    assert again.chosen.key == tuned.chosen.key
    for c, p in first.items():
        np.testing.assert_array_equal(again.fitted.predict(data.validation)[c], p)
    light = _tune(data, tmp_path, refit=False)  # the choice alone, from the records
    assert light.fitted is None and light.chosen.key == tuned.chosen.key
    larger = _tune(data, tmp_path, budget=4)  # one more configuration: one more trial
    after = _trial_files(tmp_path)
    assert len(after) == 4 and all(after[p] == t for p, t in files.items())
    assert [t.key for t in larger.trials[:3]] == [t.key for t in tuned.trials]
    changed = deep_merge(BASE, {"model": {"rare_hidden": [4]}})  # invalidates every trial
    _tune(data, tmp_path, budget=1, base=validate_config(changed))
    assert len(_trial_files(tmp_path)) == 5


def test_logistic_regression_choice_matches_sklearn(data, tmp_path):
    tuned = _tune(data, tmp_path, method=LOGISTIC, budget=5)
    clients = sorted(data.validation)

    def pooled(datasets):
        x = np.vstack([design_matrix(datasets[c]).toarray() for c in clients])
        return x, np.concatenate([datasets[c].y for c in clients]).astype(int)

    x_fit, y_fit = pooled(data.fit.train)
    x_val, y_val = pooled(data.validation)
    scores = {}
    for configuration in configurations(LOGISTIC, 5):
        c = configuration["logistic.C"]
        model = LogisticRegression(C=c, max_iter=5000, tol=1e-6).fit(x_fit, y_fit)
        scores[c] = roc_auc_score(y_val, model.predict_proba(x_val)[:, 1])
    best = max(scores, key=scores.get)
    assert tuned.chosen.configuration["logistic.C"] == best
    assert tuned.chosen.validation_auc == pytest.approx(scores[best], abs=1e-4)
    assert x_fit.shape[1] == 1 + 1 + data.n_rare  # PRS, one covariate, the rare dosages


def test_no_choice_reads_the_test_split_or_the_truth(cohort, tmp_path):
    # permuting every test label and scrambling the truth leaves every choice unchanged
    federation = load_federation(cohort["data"])
    rng = np.random.default_rng(0)
    scrambled = replace(
        federation,
        test={c: replace(d, y=rng.permutation(d.y)) for c, d in federation.test.items()},
    )
    shutil.copytree(cohort["samples"].parent, tmp_path / "cohort")
    truth = tmp_path / "cohort" / "truth" / "causal_variants.tsv"
    table = pd.read_csv(truth, sep="\t")
    table["cluster"] = rng.permutation(table["cluster"].to_numpy())
    table.to_csv(truth, sep="\t", index=False)
    choices = []
    for label, fed in (("original", federation), ("scrambled", scrambled)):
        split = three_way_split(fed, 0.25, random_seed=3)
        out = tmp_path / label
        record = {}
        for method in ("fedavg", "fedce", LOGISTIC):
            tuned = _tune(split, out, method=method, budget=2)
            record[method] = [(t.configuration, t.validation_auc, t.best_round, t.clusters)
                              for t in tuned.trials] + [tuned.chosen.key]  # fmt: skip
        choices.append(record)
    assert choices[0] == choices[1]


# --- references -------------------------------------------------------------------------------
def test_prs_only_floor(data):
    no_cov = {c: replace(d, covariates=None) for c, d in data.test.items()}
    floor = prs_only_scores(data.fit.train, no_cov)
    for c, d in no_cov.items():
        np.testing.assert_array_equal(floor[c], d.prs.astype(np.float64))
    with_cov = prs_only_scores(data.fit.train, data.test)  # covariates: LR on [PRS, age]
    clients = sorted(data.test)
    x = np.vstack([np.column_stack([data.fit.train[c].prs, data.fit.train[c].covariates])
                   for c in clients])  # fmt: skip
    y = np.concatenate([data.fit.train[c].y for c in clients])
    reference = LogisticRegression(C=np.inf, max_iter=5000).fit(x, y)
    for c in clients:
        expected = reference.predict_proba(
            np.column_stack([data.test[c].prs, data.test[c].covariates])
        )[:, 1]
        np.testing.assert_allclose(with_cov[c], expected, rtol=1e-4)


def _plink_cohort(tmp_path, rng):
    samples = [f"s{i}" for i in range(60)]
    ids = [f"v{j}" for j in range(20)]
    variants = pd.DataFrame(
        {"chrom": "1", "pos": np.arange(1, 21) * 100, "id": ids, "ref": "A", "alt": "G"}
    )
    genotypes = rng.integers(0, 3, size=(60, 20)).astype(np.int8)
    with BedWriter(tmp_path / "geno", samples) as bed:
        bed.write(variants, genotypes)
    causal = variants.iloc[[1, 4, 9, 15]].copy()
    causal["variant_key"] = [f"1:{p}:A:G" for p in causal["pos"]]
    causal["effect_allele"] = ["G", "A", "G", "G"]  # one effect on the REF allele
    causal["effect"] = [0.5, -1.25, 0.75, 2.0]
    causal["kind"], causal["cluster"] = ["common", "rare", "rare", "common"], ["", "0", "1", ""]
    (tmp_path / "truth").mkdir()
    causal.to_csv(tmp_path / "truth" / "causal_variants.tsv", sep="\t", index=False)
    return samples, causal


@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")
def test_genetic_values_from_genotypes_equal_plink2_score(tmp_path):
    samples, causal = _plink_cohort(tmp_path, np.random.default_rng(4))
    causal[["id", "effect_allele", "effect"]].to_csv(tmp_path / "score.txt", sep="\t",
                                                      index=False, header=False)  # fmt: skip
    subprocess.run(["plink2", "--bfile", str(tmp_path / "geno"), "--score",
                    str(tmp_path / "score.txt"), "1", "2", "3", "cols=+scoresums",
                    "--out", str(tmp_path / "plink")], check=True, capture_output=True)  # fmt: skip
    plink = pd.read_csv(tmp_path / "plink.sscore", sep="\t")
    expected = dict(zip(plink["IID"].astype(str), plink["SCORE1_SUM"], strict=True))
    values = genetic_values(tmp_path / "truth", samples[::-1], genotypes=tmp_path / "geno")
    np.testing.assert_allclose(values, [expected[s] for s in samples[::-1]], rtol=1e-6)


def test_genetic_values_table_and_errors(tmp_path):
    samples, causal = _plink_cohort(tmp_path, np.random.default_rng(5))
    with pytest.raises(InputDataError, match="the oracle needs the genotypes"):
        genetic_values(tmp_path / "truth", samples)
    pd.concat([causal, causal.iloc[:1]]).to_csv(tmp_path / "truth" / "causal_variants.tsv",
                                                sep="\t", index=False)  # fmt: skip
    with pytest.raises(InputDataError, match="several rows per variant"):
        genetic_values(tmp_path / "truth", samples, genotypes=tmp_path / "geno")
    pd.DataFrame({"sample_id": ["a", "b"], "genetic_common": [0.5, -1.0],
                  "genetic_rare": [0.25, 0.0]}).to_csv(tmp_path / "truth" / "genetic_values.tsv",
                                                       sep="\t", index=False)  # fmt: skip
    np.testing.assert_allclose(genetic_values(tmp_path / "truth", ["b", "a"]), [-1.0, 0.75])
    with pytest.raises(InputDataError, match=r"1 samples absent from .*genetic_values.tsv: zz"):
        genetic_values(tmp_path / "truth", ["a", "zz"])


# --- outcomes and intervals ---------------------------------------------------------------------
def test_delong_interval_of_one_auc_matches_the_paired_test():
    rng = np.random.default_rng(1)
    y = rng.random(400) < 0.3
    score = y + rng.normal(size=400)
    auc, low, high = delong_ci(y, score)
    se = delong_test(y, score, np.zeros(400)).se  # a constant score adds no variance
    assert auc == pytest.approx(roc_auc_score(y, score))
    assert high - auc == pytest.approx(stats.norm.ppf(0.975) * se)
    assert auc - low == pytest.approx(high - auc)


def test_outcome_table_pooled_and_per_cluster(data, cohort):
    samples = pd.read_csv(cohort["samples"], sep="\t")
    groups = dict(zip(samples["sample_id"], samples["cluster"].astype(str), strict=True))
    ids = [s for c in sorted(data.test) for s in data.test[c].sample_ids]
    rng = np.random.default_rng(2)
    values = dict(zip(ids, rng.normal(size=len(ids)), strict=True))
    carriers = {c: rng.random(d.n_samples) < 0.5 for c, d in data.test.items()}
    frame = predictions_frame(oracle_scores(data.test, values), data.test,
                              sample_clusters=groups, carriers=carriers)  # fmt: skip
    table = outcome_table(frame).set_index(["subset", "metric"])
    assert table.loc[("pooled", "auc"), "value"] == pytest.approx(roc_auc_score(frame.y, frame.p))
    for cluster, part in frame.groupby("cluster"):
        row = table.loc[(f"cluster={cluster}", "carrier_auc")]
        carried = part[part["carrier"]]
        assert row["n"] == len(carried)
        assert row["value"] == pytest.approx(roc_auc_score(carried.y, carried.p))
        assert row["ci_low"] <= row["value"] <= row["ci_high"]


# --- paired analysis ----------------------------------------------------------------------------
def _outcomes(rng, n_cohorts=6):
    rows = []
    for scenario in ("a", "b"):
        for k in range(n_cohorts):
            for method in ("fedce", "fedavg", "local"):
                for metric in ("auc", "carrier_auc"):
                    rows.append({"scenario": scenario, "cohort": f"c{k}", "method": method,
                                 "subset": "pooled", "metric": metric,
                                 "value": rng.uniform(0.5, 0.7)})  # fmt: skip
    return pd.DataFrame(rows)


def test_paired_deltas_are_mean_within_cohort_differences(tmp_path):
    outcomes = _outcomes(np.random.default_rng(3))
    deltas = paired_deltas(outcomes, "fedce", "fedavg")
    wide = outcomes.pivot_table(index=["scenario", "cohort", "metric"], columns="method",
                                values="value")  # fmt: skip
    for row in deltas.itertuples():
        d = (wide["fedce"] - wide["fedavg"]).xs((row.scenario, row.metric), level=[0, 2])
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert row.delta == pytest.approx(d.mean())
        assert row.ci_high - row.delta == pytest.approx(half)
        assert row.n_cohorts == len(d) and row.n_positive == int((d > 0).sum())
    validation = outcomes[outcomes["metric"] == "auc"].rename(columns={"value": "validation_auc"})
    best = best_baselines(validation, ["fedavg", "local"])
    picked = validation[validation["method"].isin(["fedavg", "local"])]
    expected = picked.loc[picked.groupby(["scenario", "cohort"])["validation_auc"].idxmax()]
    assert best["method"].tolist() == expected["method"].tolist()
    vs_best = paired_deltas(outcomes, "fedce", BEST_BASELINE, best=best)
    assert set(vs_best["reference"]) == {BEST_BASELINE}
    path = forest_plot(pd.concat([deltas, vs_best]), tmp_path / "forest.png", scenarios=["a", "b"])
    assert path.stat().st_size > 0


def test_bootstrap_deltas_of_one_cohort_match_sklearn_and_need_the_same_samples():
    rng = np.random.default_rng(5)
    n = 600
    y = (rng.random(n) < 0.3).astype(int)
    base = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)],
                         "cluster": rng.choice(["cluster1", "cluster2"], n), "y": y,
                         "carrier": rng.random(n) < 0.4})  # fmt: skip
    shuffled = base.assign(p=y + rng.normal(0, 1.5, n)).sample(frac=1, random_state=1)
    frames = {"fedce": base.assign(p=y + rng.normal(0, 1.0, n)), "fedavg": shuffled}
    rows = bootstrap_deltas(frames, "fedce", "fedavg", scenario="paper", n_boot=400)
    assert set(zip(rows["subset"], rows["metric"], strict=True)) == {
        (s, m) for s in ("pooled", "cluster=cluster1", "cluster=cluster2")
        for m in ("auc", "carrier_auc")
    }  # fmt: skip
    merged = frames["fedce"].merge(frames["fedavg"][["sample_id", "p"]], on="sample_id")
    for row in rows.itertuples():
        part = merged if row.subset == "pooled" else merged[
            merged["cluster"] == row.subset.split("=")[1]]  # fmt: skip
        if row.metric == "carrier_auc":
            part = part[part["carrier"]]
        expected = roc_auc_score(part["y"], part["p_x"]) - roc_auc_score(part["y"], part["p_y"])
        assert row.delta == pytest.approx(expected)
        assert row.ci_low < row.delta < row.ci_high and row.n_cohorts == 1
        assert row.n_positive == int(row.delta > 0)
    with pytest.raises(ValueError, match="same test samples"):
        bootstrap_deltas({"a": base.assign(p=0.1), "b": base.iloc[1:].assign(p=0.2)}, "a", "b",
                         scenario="paper")  # fmt: skip
