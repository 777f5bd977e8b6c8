"""The shared server loop keeps client state across a resume (rvfedprs/federation/rounds.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _genomic_runs import run_inprocess  # noqa: E402

from rvfedprs.federation.checkpoints import (  # noqa: E402  # noqa: E402
    decode_client_state,
    encode_client_state,
    load_checkpoint,
    save_checkpoint,
)
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402
from rvfedprs.training.dp import DPState  # noqa: E402

SEED = 21
MODEL = {"common_hidden": [4], "rare_hidden": [8], "dropout": 0.0}
TRAINING = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.0, batch_size=32)


def test_client_state_codec_survives_a_checkpoint(tmp_path):
    dp = DPState(1.3, 0.7, 1e-4, rounds=2)
    dp.accountant.history = [(1.3, 0.1, 5), (1.3, 0.1, 4)]
    state = {"a": {"dp": dp, "c_i": {"w": np.arange(3, dtype=np.float32)}, "n": None, "k": [1]}}
    path = save_checkpoint(
        tmp_path / "c.pt", {"strategy_state": {}, "client_state": encode_client_state(state)}
    )
    back = decode_client_state(load_checkpoint(path)["client_state"])
    assert isinstance(back["a"]["dp"], DPState)
    assert back["a"]["dp"].state_dict() == dp.state_dict()
    assert back["a"]["dp"].epsilon() == pytest.approx(dp.epsilon())
    np.testing.assert_array_equal(back["a"]["c_i"]["w"], np.arange(3, dtype=np.float32))
    assert back["a"]["n"] is None and back["a"]["k"] == [1]


def test_client_state_that_cannot_be_saved_is_named():
    with pytest.raises(TypeError, match=r"client state a\.handle has type object"):
        encode_client_state({"a": {"handle": object()}})


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    paths = write_federation(
        tmp_path_factory.mktemp("rounds"),
        n_clients=2,
        n_clusters=2,
        samples_per_client=60,
        private_per_cluster=5,
        n_shared=4,
        causal_private=2,
        causal_shared=1,
    )
    return load_federation(paths["data"])


def _dp_states(federation):
    return {c: {"dp": DPState(1.1, 1.0)} for c in federation.client_ids}


def _run(federation, out, rounds, *, resume=False):
    from rvfedprs.config import load_config

    strategy = strategy_from_config("fedavg", load_config(None))
    state = _dp_states(federation)
    result = run_inprocess(
        federation,
        strategy,
        rounds=rounds,
        model_config=MODEL,
        training=TRAINING,
        random_seed=SEED,
        out=out,
        resume=resume,
        client_state=state,
    )
    return result, state


def test_resume_with_dp_state_equals_an_uninterrupted_run(federation, tmp_path):
    whole, whole_state = _run(federation, tmp_path / "whole", 2)
    _run(federation, tmp_path / "split", 1)
    resumed, resumed_state = _run(federation, tmp_path / "split", 2, resume=True)
    for c in federation.client_ids:
        # the accountant spans both rounds: without the saved state it would hold round 2 only
        assert resumed_state[c]["dp"].rounds == 2
        assert resumed_state[c]["dp"].state_dict() == whole_state[c]["dp"].state_dict()
        assert resumed_state[c]["dp"].epsilon() > 0
    for key, value in whole.strategy.parameters.items():
        np.testing.assert_allclose(resumed.strategy.parameters[key], value, rtol=1e-6, atol=1e-7)
    saved = load_checkpoint(tmp_path / "split" / "checkpoints" / "round_002.pt")["client_state"]
    assert sorted(saved) == federation.client_ids
