"""Federated rare-variant association (issue 40, item 1): sums, tests and the command.

Oracle: the pooled training data of every site, the floor fitted by scikit-learn, and every
statistic written from its formula with numpy on the pooled dosage matrix — the per-group
scores from a design with one column per variant and group, the collapsed pseudo-variant as a
summed dosage column — independent of the sites' sums and of the package's covariance code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.association.gene_tests import beta_weights  # noqa: E402
from rvfedprs.association.runner import associate  # noqa: E402
from rvfedprs.association.scores import EfficientScores  # noqa: E402
from rvfedprs.association.sums import UnitLayout  # noqa: E402
from rvfedprs.association.table import association_table  # noqa: E402
from rvfedprs.burden import burden_from_config  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import ConfigError, InputDataError  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import RunSpec, serve  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.genomic.engine import genomic_settings  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

BURDEN = {"window_bp": 200}
CUTOFFS = [0.05, 0.01]
SECAGG = {"enabled": True, "quantization_bits": 30, "modulus_bits": 62, "clipping_range": 1.0,
          "min_clients": 3}  # fmt: skip


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("association")
    info = write_federation(root, n_clients=6, n_clusters=2, covariates=("age",))
    groups = root / "groups.tsv"
    pd.DataFrame({"client": list(info["clusters"]),
                  "group": [f"g{c}" for c in info["clusters"].values()]}).to_csv(
        groups, sep="\t", index=False)  # fmt: skip
    return {"data": info["data"], "groups": groups, "clusters": info["clusters"], "root": root}


def _config(cohort, **sections):
    associate_section = {"groups": str(cohort["groups"]), "maf_cutoffs": CUTOFFS}
    associate_section.update(sections.pop("associate", {}))
    return validate_config({
        "train": {"data": str(cohort["data"]), "seed": 3, "progress": False,
                  **sections.pop("train", {})},
        "burden": BURDEN, "associate": associate_section, **sections,
    })  # fmt: skip


@pytest.fixture(scope="module")
def clear_run(cohort, tmp_path_factory):
    return associate(_config(cohort), tmp_path_factory.mktemp("clear"))


@pytest.fixture(scope="module")
def oracle(cohort):
    """Pooled floor, μ, W, dosages and group of every training sample (numpy, scikit-learn)."""
    federation = load_federation(cohort["data"])
    pooled = pool_clients(federation.train)
    z = glm_design(pooled, "floor").toarray()
    fit = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    fit.fit(z[:, 1:], pooled.y.astype(int))
    floor = np.concatenate([fit.intercept_, fit.coef_.ravel()])
    mu = expit(z @ floor)
    names = sorted({f"g{c}" for c in cohort["clusters"].values()})
    group = np.concatenate([
        np.full(federation.train[c].n_samples, names.index(f"g{cohort['clusters'][c]}"))
        for c in sorted(federation.train)
    ])  # fmt: skip
    variants = pd.read_csv(Path(cohort["data"]) / "rare_variants.tsv", sep="\t")
    units = burden_from_config(
        cohort["data"], validate_config({"burden": {**BURDEN, "weights": "flat",
                                                    "max_maf": 0.5}})["burden"])  # fmt: skip
    return {"z": z, "y": pooled.y.astype(float), "mu": mu, "w": mu * (1 - mu), "floor": floor,
            "a": pooled.rare.toarray().astype(float), "group": group, "names": names,
            "variants": variants, "units": units}  # fmt: skip


def _scores(o, design):
    """Efficient scores of ``design``'s columns and their null covariance, from the formulas."""
    w = o["w"]
    u = design.T @ (o["y"] - o["mu"])
    info = design.T @ (design * w[:, None])
    cross = o["z"].T @ (design * w[:, None])
    h = o["z"].T @ (o["z"] * w[:, None])
    return u, info - cross.T @ np.linalg.solve(h, cross)


def _by_group(o, design):
    """One column per (group, column of ``design``): the design within each group, stacked."""
    return np.hstack([design * (o["group"] == m)[:, None] for m in range(len(o["names"]))])


def _rows(table, test, group="all", maf=None):
    rows = table[(table["test"] == test) & (table["group"] == group)]
    return rows if maf is None else rows[np.isclose(rows["maf_max"], maf)]


def _same_rows(a, b):
    """Two runs' tables list the same rows in the same order."""
    assert list(a["unit"]) == list(b["unit"]) and list(a["test"]) == list(b["test"])


def _unit_design(o, unit_name, maf_max, mask=None):
    """The unit's kept dosages with its ultra-rare ones summed into one column (last), weights."""
    cols = o["units"].matrix[:, o["units"].regions.index(unit_name)].nonzero()[0]
    maf = o["variants"]["maf"].to_numpy()
    mac = o["a"].sum(axis=0)
    inside = np.ones(maf.size, bool) if mask is None else mask
    cols = cols[(maf[cols] <= maf_max) & (mac[cols] > 0) & inside[cols]]
    ultra = mac[cols] <= 10
    if ultra.sum() >= 2:
        design = np.column_stack([o["a"][:, cols[~ultra]], o["a"][:, cols[ultra]].sum(axis=1)])
        unit_maf = np.append(maf[cols[~ultra]], min(maf[cols[ultra]].sum(), 0.5))
    else:
        design, unit_maf = o["a"][:, cols], maf[cols]
    return design, beta_weights(unit_maf)


def test_the_floor_and_single_variant_scores_equal_the_pooled_oracle(clear_run, oracle):
    np.testing.assert_allclose(clear_run.summary["floor"], oracle["floor"], atol=1e-6)
    u, phi = _scores(oracle, oracle["a"])
    scores = clear_run.strategy.scores()
    np.testing.assert_allclose(scores.score.sum(axis=0), u, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(scores.pooled_variance(), np.diag(phi), rtol=1e-8, atol=1e-10)
    rows = _rows(clear_run.table, "score").set_index("unit")
    keys = oracle["variants"]["variant_key"]
    carried = oracle["a"].sum(axis=0) > 0
    want = u[carried] ** 2 / np.diag(phi)[carried]
    np.testing.assert_allclose(rows.loc[keys[carried], "statistic"], want, rtol=1e-8)
    np.testing.assert_allclose(rows.loc[keys[carried], "p"], stats.chi2.sf(want, 1), rtol=1e-7)
    np.testing.assert_array_equal(rows.loc[keys[carried], "mac"], oracle["a"].sum(0)[carried])
    np.testing.assert_array_equal(rows.loc[keys[carried], "n_carriers"],
                                  (oracle["a"] > 0).sum(0)[carried])  # fmt: skip


def test_heterogeneous_and_per_group_variant_tests_equal_the_oracle(clear_run, oracle):
    u, phi = _scores(oracle, _by_group(oracle, oracle["a"]))
    p = oracle["a"].shape[1]
    het = _rows(clear_run.table, "score_het", "by_group").set_index("unit")
    for j, key in enumerate(oracle["variants"]["variant_key"][:40]):
        idx = np.arange(len(oracle["names"])) * p + j
        block = phi[np.ix_(idx, idx)]
        keep = np.diag(block) > 1e-9
        want = u[idx][keep] @ np.linalg.solve(block[np.ix_(keep, keep)], u[idx][keep])
        assert het.loc[key, "statistic"] == pytest.approx(want, rel=1e-8)
        assert het.loc[key, "df"] == keep.sum()
        for m, name in enumerate(oracle["names"]):
            within = _rows(clear_run.table, "score", name).set_index("unit")
            if keep[m]:
                assert within.loc[key, "statistic"] == pytest.approx(
                    u[idx[m]] ** 2 / block[m, m], rel=1e-8)  # fmt: skip
            else:
                assert key not in within.index  # nobody in the group carries it: no row


def test_gene_burden_skat_and_their_heterogeneous_forms_equal_the_oracle(clear_run, oracle):
    table = clear_run.table
    tested = _rows(table, "burden", maf=0.05)["unit"]
    assert len(tested) == oracle["units"].n_regions
    for unit in tested:
        design, w = _unit_design(oracle, unit, 0.05)
        u, phi = _scores(oracle, design)
        burden = _rows(table, "burden", maf=0.05).set_index("unit").loc[unit]
        assert burden["statistic"] == pytest.approx((w @ u) ** 2 / (w @ phi @ w), rel=1e-8)
        skat = _rows(table, "skat", maf=0.05).set_index("unit").loc[unit]
        assert skat["statistic"] == pytest.approx(np.sum((w * u) ** 2), rel=1e-8)
        # heterogeneous burden: the groups' burden scores and their joint null covariance
        gu, gphi = _scores(oracle, _by_group(oracle, design @ w[:, None]))
        het = _rows(table, "burden_het", "by_group", maf=0.05).set_index("unit").loc[unit]
        rank = np.linalg.matrix_rank(gphi, tol=1e-10 * np.abs(gphi).max())
        assert het["df"] == rank  # a unit nobody in one group carries has one degree
        want = gu @ np.linalg.pinv(gphi, rcond=1e-10) @ gu
        assert het["statistic"] == pytest.approx(want, rel=1e-8)
        assert het["p"] == pytest.approx(stats.chi2.sf(want, rank), rel=1e-7)
        su, _ = _scores(oracle, _by_group(oracle, design))
        het_skat = _rows(table, "skat_het", "by_group", maf=0.05).set_index("unit").loc[unit]
        assert het_skat["statistic"] == pytest.approx(np.sum((np.tile(w, 2) * su) ** 2),
                                                      rel=1e-8)  # fmt: skip


def test_a_mask_from_an_annotation_file_tests_its_variants_only(cohort, oracle, tmp_path):
    keys = oracle["variants"]["variant_key"].to_list()
    lof = np.arange(len(keys)) % 3 == 0  # every third variant; one left without a value
    values = np.where(lof, "1", "0").astype(object)
    values[1] = ""
    annotations = tmp_path / "annotations.tsv"
    pd.DataFrame({"variant_key": keys, "lof": values}).to_csv(annotations, sep="\t", index=False)
    burden = {**BURDEN, "annotations": str(annotations)}
    result = associate(_config(cohort, burden=burden, associate={"masks": ["lof"]}),
                       tmp_path / "out")  # fmt: skip
    rows = result.table[(result.table["test"] == "burden") & (result.table["group"] == "all")
                        & (result.table["mask"] == "lof")].set_index("unit")  # fmt: skip
    assert len(rows)
    for unit, row in rows.iterrows():
        design, w = _unit_design(oracle, unit, row["maf_max"], mask=lof)
        u, phi = _scores(oracle, design)
        assert row["statistic"] == pytest.approx((w @ u) ** 2 / (w @ phi @ w), rel=1e-8)


def test_every_unit_gets_acat_o_and_the_file_has_every_column(clear_run):
    table = pd.read_csv(clear_run.files["associations"], sep="\t")
    assert list(table.columns) == ["unit", "test", "maf_max", "mask", "group", "n_variants",
                                   "n_carriers", "mac", "statistic", "df", "p"]  # fmt: skip
    units = set(_rows(table, "burden")["unit"])
    assert set(_rows(table, "acat_o")["unit"]) == units
    assert set(_rows(table, "acat_o_het", "by_group")["unit"]) == units
    finite = table["p"].dropna()
    assert ((finite >= 0) & (finite <= 1)).all()
    # the planted effects are found: the best unit is far beyond Bonferroni
    assert clear_run.summary["top_units"][0]["p"] < 1e-6
    summary = json.loads(clear_run.files["summary"].read_text())
    assert summary["lambda_gc"]["score"] > 0 and summary["units_tested"] == len(units)
    for name in ("qq", "manhattan"):
        assert clear_run.files[name].stat().st_size > 10_000


def test_a_sites_unit_blocks_equal_the_dense_gram_of_each_unit():
    """K_g = A_gᵀ W A_g from one person's carried pairs within a unit = the dense product.

    Overlapping units (a variant in several), units of one variant, dosages 1 and 2, and
    variants outside every unit.
    """
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    dosages = sp.random(2000, 300, density=0.02, random_state=4, format="csr")
    dosages.data = np.ceil(dosages.data * 2)
    weight = rng.uniform(0.05, 0.25, 2000)
    members = [rng.choice(250, size=size, replace=False) for size in rng.integers(1, 25, 50)]
    layout = UnitLayout.from_members([f"u{g}" for g in range(50)], members)
    gram = (dosages.T @ sp.diags(weight) @ dosages).toarray()
    expected = np.concatenate([gram[np.ix_(m, m)].ravel() for m in layout.members])
    np.testing.assert_allclose(layout.weighted_blocks(dosages, weight), expected, rtol=1e-12,
                               atol=1e-12)  # fmt: skip


def test_units_tested_in_batches_equal_each_unit_tested_alone(cohort, clear_run):
    """The units of one size, tested as one batch, give what each gives tested alone.

    Over two groups and pooled into one. Masks make one-variant sets of every unit (its first
    variant), two-variant ones (its first two) and sparse ones with every third unit left
    without a carried variant (no rows).
    """
    strategy = clear_run.strategy
    members = strategy.layout.members
    variants = pd.read_csv(Path(cohort["data"]) / "rare_variants.tsv", sep="\t")
    masks = {name: np.zeros(len(variants), bool) for name in ("first", "pair")}
    sparse = np.arange(len(variants)) % 4 == 0
    for unit, columns in enumerate(members):
        masks["first"][columns[:1]] = masks["pair"][columns[:2]] = True
        sparse[columns] &= unit % 3 != 0
    masks.update(all=np.ones(len(variants), bool), sparse=sparse)
    pooled = {name: value.sum(axis=0, keepdims=True) for name, value in strategy.sums.items()}
    runs = (
        (strategy.scores(), strategy.group_names),
        (EfficientScores(pooled, strategy.floor_hessian, strategy.layout), ["all"]),
    )
    for scores, groups in runs:
        # half the variants ultra-rare: collapsed pseudo-variants too
        collapse = float(np.median(scores.mac.sum(axis=0)))
        settings = {"group_names": groups, "maf_cutoffs": CUTOFFS, "masks": masks,
                    "collapse_mac": collapse}  # fmt: skip
        batched = association_table(scores, variants, **settings)
        alone = association_table(scores, variants, **settings, batched=False)
        burden = batched[(batched["test"] == "burden") & (batched["group"] == "all")]
        assert (burden["n_variants"] == 1).sum() > 1 and (burden["n_variants"] > 1).sum() > 1
        assert set(burden["unit"]) - set(burden.loc[burden["mask"] == "sparse", "unit"])
        if len(groups) > 1:
            assert {"burden_het", "skat_het", "acat_v_het", "acat_o_het"} <= set(batched["test"])
        numbers = ["statistic", "p"]
        pd.testing.assert_frame_equal(batched.drop(columns=numbers), alone.drop(columns=numbers))
        for column in numbers:
            np.testing.assert_allclose(batched[column].astype(float),
                                       alone[column].astype(float), rtol=1e-12, atol=0)  # fmt: skip


def test_secure_sums_give_the_same_table(cohort, clear_run, tmp_path):
    """Six sites in two groups of three: every group's sum has at least min_clients sites."""
    secure = associate(_config(cohort, secagg=SECAGG), tmp_path / "secure")
    a, b = clear_run.table, secure.table
    _same_rows(a, b)
    # 30-bit quantisation on [-1, 1]: each summed entry within ~1e-6 of the exact sum, so a
    # statistic near 0 (U near 0) differs by ~1e-9 absolute, a large one by ~1e-5 relative
    np.testing.assert_allclose(b["statistic"].astype(float), a["statistic"].astype(float),
                               rtol=1e-4, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(b["p"].astype(float), a["p"].astype(float), rtol=1e-4,
                               atol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(b["mac"], a["mac"])  # counts rounded back to integers
    np.testing.assert_array_equal(b["n_carriers"], a["n_carriers"])


def test_a_group_of_fewer_sites_than_secagg_min_clients_is_refused(cohort, tmp_path):
    groups = tmp_path / "groups.tsv"
    clients = sorted(cohort["clusters"])
    pd.DataFrame({"client": clients, "group": ["a", "a", "a", "a", "b", "b"]}).to_csv(
        groups, sep="\t", index=False)  # fmt: skip
    config = _config(cohort, secagg=SECAGG, associate={"groups": str(groups)})
    with pytest.raises(Exception, match=r"association groups \{'b': 2\} have fewer than "
                       r"secagg.min_clients = 3"):  # fmt: skip
        associate(config, tmp_path / "out")


def test_a_site_without_a_group_is_named(cohort, tmp_path):
    groups = tmp_path / "groups.tsv"
    pd.DataFrame({"client": ["client00"], "group": ["a"]}).to_csv(groups, sep="\t", index=False)
    with pytest.raises(ConfigError, match=r"names no group for sites \['client01'"):
        associate(_config(cohort, associate={"groups": str(groups)}), tmp_path / "out")


def test_the_command_writes_the_table_and_plots_and_refuses_bad_input(cohort, tmp_path):
    import yaml

    config = tmp_path / "associate.yaml"
    config.write_text(yaml.safe_dump({
        "train": {"data": str(cohort["data"]), "seed": 3},
        "burden": BURDEN, "associate": {"maf_cutoffs": CUTOFFS},
    }))  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "rvfedprs", "associate", "--config", str(config),
                           "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in ("associations.tsv", "qq.png", "manhattan.png", "summary.json",
                 "provenance.json"):  # fmt: skip
        assert (out / name).is_file(), name
    assert "lambda_GC" in done.stderr and "best unit ACAT-O" in done.stderr
    table = pd.read_csv(out / "associations.tsv", sep="\t")
    assert not (table["group"] == "by_group").any()  # one group: pooled tests only
    bad = subprocess.run([sys.executable, "-m", "rvfedprs", "associate", "--config", str(config),
                          "--out", str(out), "--groups", str(tmp_path / "nope.tsv")],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "nope.tsv does not exist" in bad.stderr


#: Runs the CLI, then prints which of these modules the process had loaded.
_LOADED_PROBE = """
import runpy, sys
sys.argv = ["rvfedprs", *sys.argv[1:]]
try:
    runpy.run_module("rvfedprs", run_name="__main__")
except SystemExit as stop:
    code = stop.code
print(sorted(m for m in ("torch", "opacus", "matplotlib.pyplot") if m in sys.modules))
sys.exit(code)
"""


def test_the_command_loads_neither_torch_nor_pyplot(cohort, tmp_path):
    """An association trains no network: torch (and opacus, pyplot) never enter its process.

    Gene tests, groups and plots included; importing torch alone cost more than the rest of a
    map-size run (BENCHMARKS.md).
    """
    import yaml

    config = tmp_path / "associate.yaml"
    config.write_text(yaml.safe_dump({
        "train": {"data": str(cohort["data"]), "seed": 3}, "burden": BURDEN,
        "associate": {"maf_cutoffs": CUTOFFS, "groups": str(cohort["groups"])},
    }))  # fmt: skip
    out = tmp_path / "out"
    command = [sys.executable, "-c", _LOADED_PROBE, "associate", "--config", str(config),
               "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (out / "qq.png").is_file() and (out / "manhattan.png").is_file()
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_flower_simulation_gives_the_in_process_table(cohort, clear_run, tmp_path):
    flower = associate(_config(cohort, train={"engine": "flower-sim"}), tmp_path / "sim")
    a, b = clear_run.table, flower.table
    _same_rows(a, b)
    np.testing.assert_allclose(b["statistic"].astype(float), a["statistic"].astype(float),
                               rtol=1e-9, atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(b["p"].astype(float), a["p"].astype(float), rtol=1e-9,
                               atol=1e-300)  # fmt: skip


class _LosingAssociation(GenomicTask):
    """The genomic task whose site ``lost`` never answers from its first association round on."""

    def __init__(self, lost: str) -> None:
        super().__init__()
        self.lost, self.dead = lost, False

    def fit(self, instruction, site, settings, state, *, random_seed):
        if site.client_id == self.lost and "association" in instruction.config.get("glm", {}):
            self.dead = True
        if self.dead and site.client_id == self.lost:
            raise InputDataError(f"site {self.lost}: node lost")
        return super().fit(instruction, site, settings, state, random_seed=random_seed)


def _serve_association(federation, task, out, min_replies=None):
    config = _config({"data": federation.data_dir, "groups": None},
                     associate={"groups": None})  # fmt: skip
    strategy = strategy_from_config("fedassoc", config)
    transport = InProcessTransport(task, sites_of(federation))
    settings = genomic_settings(federation, model_config={"start_from_floor": False},
                                training=LocalTrainingConfig())  # fmt: skip
    job = {"seed": 3, "rounds": 40, "resume": False, "min_replies": min_replies}
    serve(task, transport, [RunSpec(strategy, out=out)], job, settings)
    return strategy


def test_a_site_lost_in_the_association_round_refits_the_floor_without_it(cohort, tmp_path):
    """The sums are then those of the sites left at their own floor: a run on those sites alone.

    The two runs standardise the PRS and covariates with different federated moments (all six
    sites' against five), so the floor's coefficients and Zᵀ W A differ by that affine change;
    the fitted probabilities, and so the scores, information and efficient variances, do not
    (to ~1e-7: the PRS is stored as float32, so the two standardisations round differently).
    Without the refit the scores would sit at the six-site floor, ~1e-2 away.
    """
    everyone = load_federation(cohort["data"])
    lost = everyone.client_ids[-1]
    survived = _serve_association(everyone, _LosingAssociation(lost), tmp_path / "lost",
                                  min_replies=len(everyone.client_ids) - 1)  # fmt: skip
    assert survived.refits and survived.refits[0]["lost"] == [lost]
    assert lost not in survived.floor_sites
    rest = load_federation(cohort["data"], clients=[c for c in everyone.client_ids if c != lost])
    direct = _serve_association(rest, GenomicTask(), tmp_path / "rest")
    for name in ("assoc.score", "assoc.information", "assoc.blocks", "assoc.mac",
                 "assoc.carriers", "assoc.samples", "assoc.cases"):  # fmt: skip
        np.testing.assert_allclose(survived.sums[name], direct.sums[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)  # fmt: skip
    np.testing.assert_allclose(survived.scores().pooled_variance(),
                               direct.scores().pooled_variance(), rtol=1e-6, atol=1e-6)  # fmt: skip
