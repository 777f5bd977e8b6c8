"""`rvfedprs mia` on networks with collapsed rare inputs (burden, top-k).

The audit scores the run's network (the checkpoint's: a burden map, the chosen top-k variants),
not one built from the configuration's ``model`` section, which has neither. Each shadow
federation is a run of its own: with a top-k input its warm start chooses its own variants
(oracle: the pooled score test under the pooled floor on the shadow's training samples, numpy
and scikit-learn), and its models are scored through them. The channels are audited on the
specialist's input features (regions, chosen variants).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _score_oracle import pooled_score_test, ranking  # noqa: E402

from rvfedprs.burden import BurdenMap  # noqa: E402
from rvfedprs.cli import main  # noqa: E402
from rvfedprs.evaluation.attacks import ShadowModels, example_confidence  # noqa: E402
from rvfedprs.evaluation.attacks.outputs import example_logits, stack_clients  # noqa: E402
from rvfedprs.evaluation.attacks.shadows import shadow_splits  # noqa: E402
from rvfedprs.genomic.data import pool_clients  # noqa: E402
from rvfedprs.genomic.task import training_config  # noqa: E402

K = 4
BURDEN = {"window_bp": 200, "max_maf": 0.05, "weights": "flat"}


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("mia_rare")
    return root, write_federation(root, n_clients=4, n_clusters=2, samples_per_client=60,
                                  private_per_cluster=10, n_shared=6, seed=5)  # fmt: skip


@pytest.fixture(scope="module")
def audited(federation):
    """rare_input → (config, run folder), each audited once."""
    done = {}

    def audit(rare_input: str) -> tuple[Path, Path]:
        if rare_input not in done:
            done[rare_input] = _audited(federation, rare_input)
        return done[rare_input]

    return audit


def _audited(federation, rare_input: str) -> tuple[Path, Path]:
    """`rvfedprs train` (FedAvg, one round) then `rvfedprs mia` with shadow federations."""
    root, paths = federation
    model = {"common_hidden": [4], "rare_hidden": [8], "rare_input": rare_input}
    if "top_k" in rare_input:
        model["top_k"] = K
    config = {
        "model": model,
        "burden": BURDEN,
        "train": {"data": str(paths["data"]), "rounds": 1, "batch_size": 32, "progress": False},
        "evaluate": {"truth": str(paths["truth"]), "samples": str(paths["samples"])},
        "mia": {"attacks": ["loss", "lira_online"], "n_shadow": 4},
    }
    path = root / f"{rare_input}.yaml"
    path.write_text(yaml.safe_dump(config))
    run = root / "runs" / rare_input
    assert main(["train", "--config", str(path), "--strategy", "fedavg", "--out", str(run),
                 "--seed", "0"]) == 0  # fmt: skip
    assert main(["mia", "--config", str(path), "--run", str(run), "--out", str(run)]) == 0
    return path, run


def _target(path: Path, run: Path) -> dict:
    from rvfedprs.commands.mia import _trained_run

    return _trained_run(argparse.Namespace(config=path, run=run, out=run))


@pytest.mark.parametrize("rare_input", ["burden", "top_k"])
def test_the_audit_scores_the_runs_network(audited, rare_input):
    """Every LOSS score is minus a loss of the run's network on one of the client's samples."""
    path, run = audited(rare_input)
    found = _target(path, run)
    projection = found["model_config"]["rare_projection"]
    features = len(projection["features"]) if rare_input == "burden" else K
    if rare_input == "top_k":
        assert len(projection["top_k"]) == K
    data = found["federation"]
    record = json.loads((run / "mia.json").read_text())
    assert {r["attack"] for r in record["rows"]} == {"loss", "lira_online"}
    assert {r["client"] for r in record["rows"]} == set(data.client_ids)
    with np.load(run / "mia_scores.npz") as scores:
        for client in data.client_ids:
            everyone = stack_clients([data.train[client], data.test[client]], client)
            logits = example_logits(found["strategy"].parameters_for(client), everyone,
                                    found["model_config"])  # fmt: skip
            losses = np.logaddexp(0.0, logits) - everyone.y * logits
            got = scores[f"{client}__loss"]
            gap = np.abs(-got[:, None] - losses[None, :]).min(axis=1)
            assert gap.max() < 1e-5, client
    channels = json.loads((run / "channels.json").read_text())["rows"]
    update = [r for r in channels if r["channel"] == "update" and not r["secure_aggregation"]]
    assert len(update) == len(data.client_ids)
    # the update channel reads the specialist's F input features, not the P variants
    weight = found["strategy"].parameters_for(data.client_ids[0])["rare.input.weight"]
    assert weight.shape == (8, features) and features < data.n_rare
    if rare_input == "burden":
        columns = BurdenMap.matrix_from_config(projection["burden"]).toarray()
    else:
        columns = np.eye(data.n_rare)[:, projection["top_k"]]
    for row in update:  # a client's own update flags only features it carries
        dosages = data.train[row["client"]].rare.toarray()
        assert row["n_positive"] == int((dosages @ columns != 0).any(axis=0).sum())
        assert row["n_positive"] + row["n_negative"] == features
        assert row["fpr"] in (0.0, None)


def test_each_shadow_federation_chooses_its_own_top_k_variants(audited):
    from rvfedprs.commands.mia import _shadow_trainer

    path, run = audited("top_k")
    found = _target(path, run)
    data = found["federation"]
    training = training_config(found["trained"], data, dp=True)
    train_shadow = _shadow_trainer(found, training)
    chosen = []
    for s in (0, 1):  # a complementary pair: each client's candidates split in halves
        sets = {}
        for i, client in enumerate(data.client_ids):
            candidates = stack_clients([data.train[client], data.test[client]], client)
            split = shadow_splits(candidates.y, 4, random_seed=11 + i)[s]
            sets[client] = candidates.subset(split)
        shadow = train_shadow(sets, 3)
        assert isinstance(shadow, ShadowModels)
        top = shadow.model_config["rare_projection"]["top_k"]
        assert top == _pooled_top_k(pool_clients(sets))
        parameters = shadow.parameters_for(data.client_ids[0])
        assert parameters["rare.input.weight"].shape == (8, K)
        everyone = stack_clients(list(sets.values()), "all")
        confidence = example_confidence(parameters, everyone, shadow.model_config)
        assert np.isfinite(confidence).all()
        chosen.append(top)
    assert chosen[0] != chosen[1]  # halves of the data choose different variants


def _pooled_top_k(pooled) -> list[int]:
    """The K largest score statistics U²/V under the pooled unpenalised floor."""
    return ranking(pooled_score_test(pooled)[1])[:K]
