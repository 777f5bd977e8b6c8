"""The ablations of SPEC §12 against their equations (numpy references, FedCE itself)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvfedprs.bloom import BloomSpec, encode
from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.genomic.client import ClientContext, fit_client
from rvfedprs.genomic.data import load_federation
from rvfedprs.model import get_parameters, model_from_config
from rvfedprs.strategies import FitResult, get_strategy, strategy_from_config
from rvfedprs.strategies.aggregation import weighted_average
from rvfedprs.strategies.fedavg_masked import RARE_INPUT, carried_columns
from rvfedprs.strategies.fedce import FedCE
from rvfedprs.strategies.fedce_oracle import client_groups
from rvfedprs.training import LocalTrainingConfig, local_update
from tests._federation_fixtures import write_federation

SPEC = BloomSpec(capacity=200, error_rate=0.01)
GROUPS = {"a": "x", "b": "x", "c": "y", "d": "y", "e": "z", "f": "z"}
N_K = {"a": 10, "b": 30, "c": 20, "d": 20, "e": 50, "f": 5}


def _w0(seed=0, n_rare=10):
    rng = np.random.default_rng(seed)
    return {
        "common.fc0.weight": rng.normal(size=(4, 1)).astype(np.float32),
        "common.fc0.bias": rng.normal(size=4).astype(np.float32),
        "rare.input.weight": rng.normal(size=(3, n_rare)).astype(np.float32),
        "rare.input.bias": rng.normal(size=3).astype(np.float32),
        "head.weight": rng.normal(size=(1, 7)).astype(np.float32),
        "head.bias": rng.normal(size=1).astype(np.float32),
    }


def _bits(group, n=40, extra=""):
    keys = [f"{group}:{i}:A:G" for i in range(n)] + [f"{extra}{i}" for i in range(3) if extra]
    return encode(keys, SPEC)


def _fedce_options(**kw):
    opts = {"bloom_capacity": SPEC.capacity, "bloom_error_rate": SPEC.error_rate, "top_k": 40}
    opts.update(kw)
    return opts


def _results(strategy, groups, n_k, rng, server_round=1, carried=None):
    """Random client updates; ``carried[c]`` (bool, shape (P,)) zeroes uncarried columns."""
    instructions = strategy.configure_fit(server_round, sorted(groups))
    out = []
    for c in sorted(groups):
        start = instructions[c].parameters
        trained = {}
        for k in sorted(start):
            step = rng.normal(size=start[k].shape).astype(np.float32)
            if k == RARE_INPUT and carried is not None:
                step *= carried[c][None, :]
            trained[k] = start[k] + step
        out.append(FitResult(c, n_k[c], trained, {"loss": 0.1}, _bits(groups[c], extra=c)))
    return out


def _same_models(s1, s2, clients):
    for c in clients:
        p1, p2 = s1.parameters_for(c), s2.parameters_for(c)
        assert sorted(p1) == sorted(p2)
        for name in p1:
            np.testing.assert_array_equal(p1[name], p2[name], err_msg=f"{c} {name}")


# --- count-normalised FedAvg ---------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_masked_fedavg_equals_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    ids = sorted(GROUPS)
    carried = {c: rng.random(10) < 0.4 for c in ids}
    for c in ids:
        carried[c][3] = c == "a"  # a column carried by a single client
        carried[c][7] = False  # a column nobody carries
    s = get_strategy("fedavg_masked")
    w0 = _w0(seed % 5)
    s.initialize(w0, ids)
    results = _results(s, GROUPS, N_K, rng, carried=carried)
    s.aggregate_fit(1, results)
    # reference: explicit loops over columns
    expected = w0[RARE_INPUT].astype(np.float64).copy()
    for j in range(10):
        num, den = np.zeros(3), 0.0
        for r in results:
            if carried[r.client_id][j]:
                num += r.n_samples * (r.parameters[RARE_INPUT][:, j] - w0[RARE_INPUT][:, j])
                den += r.n_samples
        if den > 0:
            expected[:, j] += num / den
    np.testing.assert_allclose(s.parameters[RARE_INPUT], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(s.parameters[RARE_INPUT][:, 7], w0[RARE_INPUT][:, 7])
    # a column carried by one client takes that client's weights (FedAvg would shrink it)
    np.testing.assert_allclose(
        s.parameters[RARE_INPUT][:, 3], results[0].parameters[RARE_INPUT][:, 3], rtol=1e-5
    )
    # every other tensor is FedAvg's
    fedavg = weighted_average([r.parameters for r in results], [r.n_samples for r in results])
    for name in w0:
        if name != RARE_INPUT:
            np.testing.assert_allclose(s.parameters[name], fedavg[name], rtol=1e-6)


def test_masked_fedavg_is_fedavg_when_everyone_carries_everything():
    ids = sorted(GROUPS)
    masked, plain = get_strategy("fedavg_masked"), get_strategy("fedavg")
    for s in (masked, plain):
        s.initialize(_w0(), ids)
        s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(3)))
    for name, value in plain.parameters.items():
        np.testing.assert_allclose(masked.parameters[name], value, rtol=1e-5, atol=1e-6)


def test_local_sgd_leaves_uncarried_columns_exactly_unchanged(tmp_path):
    # the mask masked FedAvg reads off an update is the client's carried set
    info = write_federation(tmp_path, n_clients=2, n_clusters=2, samples_per_client=120)
    fed = load_federation(info["data"])
    data = fed.train[fed.client_ids[0]]
    model = model_from_config(fed.n_rare, {"rare_hidden": [8]}, random_seed=0)
    start = get_parameters(model)
    config = LocalTrainingConfig(epochs=2, lr=0.1, momentum=0.9, batch_size=16, proximal_mu=0.1)
    result = local_update(model, data, config, random_seed=1)
    moved = carried_columns(result.parameters[RARE_INPUT] - start[RARE_INPUT])
    expected = np.zeros(fed.n_rare, dtype=bool)
    expected[data.carried_variants()] = True
    np.testing.assert_array_equal(moved, expected)
    assert 0 < expected.sum() < fed.n_rare


def test_masked_fedavg_refuses_weight_decay_and_dp():
    config = validate_config({"train": {"weight_decay": 0.01}})
    with pytest.raises(ConfigError, match=r"fedavg_masked.*weight_decay = 0.01"):
        strategy_from_config("fedavg_masked", config)
    config = validate_config({"dp": {"enabled": True}})
    with pytest.raises(ConfigError, match=r"dp.enabled = True"):
        strategy_from_config("fedavg_masked", config)


# --- FedAvgM ----------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    beta=st.floats(0.0, 0.95),
    eta=st.floats(0.1, 2.0),
)
def test_fedavgm_follows_the_momentum_recursion(seed, beta, eta):
    ids = sorted(GROUPS)
    s = get_strategy("fedavgm", momentum=beta, server_lr=eta)
    w = {k: v.astype(np.float64) for k, v in _w0(seed % 5).items()}
    s.initialize(_w0(seed % 5), ids)
    v = {k: np.zeros_like(a) for k, a in w.items()}
    rng = np.random.default_rng(seed)
    for rnd in (1, 2, 3):
        results = _results(s, GROUPS, N_K, rng, rnd)
        avg = weighted_average([r.parameters for r in results], [r.n_samples for r in results])
        for k in w:
            v[k] = beta * v[k] + (avg[k].astype(np.float64) - w[k])
            w[k] = w[k] + eta * v[k]
        s.aggregate_fit(rnd, results)
        for k in w:
            np.testing.assert_allclose(s.parameters[k], w[k], rtol=1e-4, atol=1e-4)


def test_fedavgm_without_momentum_is_fedavg_and_resumes():
    ids = sorted(GROUPS)
    m, a = get_strategy("fedavgm", momentum=0.0, server_lr=1.0), get_strategy("fedavg")
    for s in (m, a):
        s.initialize(_w0(), ids)
        s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(5)))
    for k, value in a.parameters.items():
        np.testing.assert_allclose(m.parameters[k], value, rtol=1e-6)
    resumed = get_strategy("fedavgm", momentum=0.0, server_lr=1.0)
    resumed.load_state_dict(m.state_dict())
    _same_models(resumed, m, ids)
    with pytest.raises(ConfigError, match=r"momentum must be in \[0, 1\)"):
        get_strategy("fedavgm", momentum=1.0)


def test_fedavgm_options_come_from_the_strategies_section():
    config = validate_config({"strategies": {"fedavgm_momentum": 0.5, "fedavgm_server_lr": 0.7}})
    s = strategy_from_config("fedavgm", config)
    assert (s.momentum, s.server_lr) == (0.5, 0.7)


# --- FedCE with oracle clusters ------------------------------------------------------------
def test_oracle_fedce_equals_fedce_whose_clustering_finds_those_groups():
    # the planted filters make FedCE's own clustering return GROUPS; the oracle is given them
    ids = sorted(GROUPS)
    fedce = get_strategy("fedce", **_fedce_options(n_clusters=3))
    oracle = get_strategy("fedce_oracle", groups=GROUPS, **_fedce_options(n_clusters=3))
    rng1, rng2 = np.random.default_rng(7), np.random.default_rng(7)
    for s in (fedce, oracle):
        s.initialize(_w0(), ids)
    for rnd in (1, 2):
        fedce.aggregate_fit(rnd, _results(fedce, GROUPS, N_K, rng1, rnd))
        oracle.aggregate_fit(rnd, _results(oracle, GROUPS, N_K, rng2, rnd))
        assert len(set(fedce.clusters().values())) == 3
        assert fedce.clusters() == oracle.clusters()
    _same_models(fedce, oracle, ids)


def test_oracle_fedce_ignores_the_filters():
    truth = {"a": 0, "b": 1, "c": 0, "d": 1, "e": 0, "f": 1}  # against the filters' grouping
    s = get_strategy("fedce_oracle", groups=truth, **_fedce_options())
    s.initialize(_w0(), sorted(GROUPS))
    s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(1)))
    found = s.clusters()
    assert {c for c in found if found[c] == found["a"]} == {"a", "c", "e"}


def test_oracle_fedce_needs_a_group_for_every_client():
    with pytest.raises(ValueError, match="needs the true groups"):
        get_strategy("fedce_oracle").initialize(_w0(), ["a"])
    s = get_strategy("fedce_oracle", groups={"a": "x"})
    with pytest.raises(ValueError, match=r"no true group for clients \['b'\]"):
        s.initialize(_w0(), ["a", "b"])


def test_oracle_groups_come_from_the_samples_sheet(tmp_path):
    sheet = tmp_path / "samples.tsv"
    pd.DataFrame(
        {
            "sample_id": ["s1", "s2", "s3"],
            "client": ["a", "a", "b"],
            "cluster": ["x", "x", "y"],
            "architecture": ["A", "A", "A"],
        }  # fmt: skip
    ).to_csv(sheet, sep="\t", index=False)
    assert client_groups(sheet) == {"a": "x", "b": "y"}
    config = validate_config(
        {"evaluate": {"samples": str(sheet)}, "strategies": {"oracle_column": "architecture"}}
    )
    assert strategy_from_config("fedce_oracle", config).groups == {"a": "A", "b": "A"}
    pd.DataFrame({"client": ["a", "a"], "cluster": ["x", "y"]}).to_csv(sheet, sep="\t")
    with pytest.raises(InputDataError, match=r"several 'cluster' values: \{'a': \['x', 'y'\]\}"):
        client_groups(sheet)


# --- FedCE with random clusters ------------------------------------------------------------
def test_random_fedce_keeps_fedce_cluster_sizes_with_seeded_members():
    ids = sorted(GROUPS)
    found = {}
    for seed in range(6):
        s = get_strategy("fedce_random", random_seed=seed, **_fedce_options(n_clusters=3))
        s.initialize(_w0(), ids)
        s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(1)))
        labels = s.clusters()
        assert sorted(np.unique(list(labels.values()), return_counts=True)[1]) == [2, 2, 2]
        found[seed] = labels
        # the permutation: client i takes the label FedCE's own clustering gave client π(i)
        order = np.random.default_rng(seed).permutation(len(ids))
        own = FedCE.assign(s, ids)
        mapped = {ids[i]: own[ids[j]] for i, j in enumerate(order)}
        assert mapped == s.assign(ids)
    again = get_strategy("fedce_random", random_seed=3, **_fedce_options(n_clusters=3))
    again.initialize(_w0(), ids)
    again.aggregate_fit(1, _results(again, GROUPS, N_K, np.random.default_rng(1)))
    assert again.clusters() == found[3]
    truth = {frozenset(c for c in ids if GROUPS[c] == g) for g in "xyz"}
    partitions = [
        {frozenset(c for c in ids if lab[c] == m) for m in set(lab.values())}
        for lab in found.values()
    ]
    assert any(p != truth for p in partitions)


def test_random_fedce_seed_defaults_to_the_run_seed():
    config = validate_config({"train": {"seed": 11}})
    assert strategy_from_config("fedce_random", config).random_seed == 11
    config = validate_config({"train": {"seed": 11}, "strategies": {"random_clusters_seed": 4}})
    assert strategy_from_config("fedce_random", config).random_seed == 4


# --- FedCE with a global head ----------------------------------------------------------------
def test_global_head_fedce_equals_fedce_with_head_aggregation_global():
    ids = sorted(GROUPS)
    named = get_strategy("fedce_global_head", **_fedce_options(n_clusters=3))
    plain = get_strategy("fedce", head_aggregation="global", **_fedce_options(n_clusters=3))
    rng1, rng2 = np.random.default_rng(2), np.random.default_rng(2)
    for s in (named, plain):
        s.initialize(_w0(), ids)
    named.aggregate_fit(1, _results(named, GROUPS, N_K, rng1))
    plain.aggregate_fit(1, _results(plain, GROUPS, N_K, rng2))
    _same_models(named, plain, ids)
    with pytest.raises(ConfigError, match="fixes head_aggregation='global'"):
        get_strategy("fedce_global_head", head_aggregation="cluster")


# --- FedCE on carried-set Jaccard -----------------------------------------------------------
def test_carried_fedce_clients_encode_every_carried_variant(tmp_path):
    info = write_federation(tmp_path, n_clients=2, n_clusters=2, samples_per_client=120)
    fed = load_federation(info["data"])
    s = get_strategy("fedce_carried", bloom_capacity=10, top_k=5)
    model = model_from_config(fed.n_rare, {"rare_hidden": [8]}, random_seed=0)
    s.initialize(get_parameters(model), fed.client_ids)
    assert s.spec.capacity == fed.n_rare  # raised from 10 so that a full carried set fits
    instruction = s.configure_fit(1, fed.client_ids)[fed.client_ids[0]]
    assert instruction.config["top_k"] is None and instruction.config["relative_threshold"] is None
    data = fed.train[fed.client_ids[0]]
    context = ClientContext(
        data, fed.variant_keys, {"rare_hidden": [8]}, LocalTrainingConfig(batch_size=32)
    )
    result = fit_client(instruction, context, random_seed=3)
    carried = [fed.variant_keys[j] for j in data.carried_variants()]
    np.testing.assert_array_equal(result.bloom_bits, encode(carried, s.spec))
    resumed = get_strategy("fedce_carried", bloom_capacity=10, top_k=5)
    resumed.load_state_dict(s.state_dict())
    assert resumed.spec == s.spec


# --- every ablation through rvfedprs.run.train ----------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["fedavg_masked", "fedavgm", "fedce_oracle", "fedce_random", "fedce_global_head",
     "fedce_carried"],
)  # fmt: skip
def test_ablations_train_end_to_end(tmp_path, name):
    import json

    from rvfedprs.run import train

    info = write_federation(tmp_path, n_clients=4, n_clusters=2, samples_per_client=80)
    config = {
        "train": {"data": str(info["data"]), "strategy": name, "rounds": 2, "seed": 3,
                  "progress": False, "batch_size": 32},
        "model": {"rare_hidden": [8], "common_hidden": [4]},
        "fedce": {"n_clusters": 2, "top_k": 20},
        "evaluate": {"truth": str(info["truth"]), "samples": str(info["samples"])},
    }  # fmt: skip
    train(config, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["strategy"] == name and 0 <= metrics["auc"] <= 1
    if name == "fedce_oracle":  # the true clusters, read from evaluate.samples
        assert metrics["ari"] == 1.0
