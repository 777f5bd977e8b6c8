"""Strategy messages survive the trip through Flower records; bad replies are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from rvfedprs.bloom import BloomSpec, encode, n_bytes
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.launch import APP_PYPROJECT, write_app, write_job
from rvfedprs.federation.flower.records import (
    MalformedReplyError,
    content_to_instruction,
    fit_result_to_content,
    instruction_to_content,
    parameters_to_record,
    record_to_parameters,
    reply_to_fit_result,
)
from rvfedprs.strategies.base import FitInstruction, FitResult

BLOOM = {"capacity": 50, "error_rate": 0.01}


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "common.0.weight": rng.normal(size=(4, 1)).astype(np.float32),
        "rare.input.weight": rng.normal(size=(3, 7)).astype(np.float32),
        "head.bias": rng.normal(size=(1,)).astype(np.float32),
    }


def _reply(**changes):
    bits = encode(["1:100:A:G", "1:200:C:T"], BloomSpec(BLOOM["capacity"], BLOOM["error_rate"]))
    result = FitResult("site1", 40, _params(1), {"loss": 0.5}, bits)
    for key, value in changes.items():
        setattr(result, key, value)
    return fit_result_to_content(result)


def test_parameters_round_trip_exactly():
    params = _params()
    back = record_to_parameters(parameters_to_record(params))
    assert list(back) == list(params)
    for key in params:
        assert back[key].dtype == params[key].dtype
        np.testing.assert_array_equal(back[key], params[key])


def test_instruction_round_trip():
    instruction = FitInstruction(_params(), {"bloom": BLOOM, "top_k": 5, "proximal_mu": 0.0})
    content = instruction_to_content(instruction, server_round=3, seed=123, run={"prs_sd": 2.0})
    back, round_, seed, run = content_to_instruction(content)
    assert (round_, seed, run) == (3, 123, {"prs_sd": 2.0})
    assert back.config == instruction.config
    for key, value in instruction.parameters.items():
        np.testing.assert_array_equal(back.parameters[key], value)


def test_fit_result_round_trip_with_bloom_bits():
    content = _reply()
    result = reply_to_fit_result(content, client_id="site1", expected=_params(), bloom=BLOOM)
    assert result.n_samples == 40 and result.metrics == {"loss": 0.5}
    assert result.bloom_bits.dtype == np.uint8
    assert result.bloom_bits.size == n_bytes(BloomSpec(BLOOM["capacity"], BLOOM["error_rate"]))
    np.testing.assert_array_equal(result.parameters["head.bias"], _params(1)["head.bias"])


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (lambda: _reply(client_id="site2"), r"client 'site1'.*names itself 'site2'"),
        (lambda: _reply(n_samples=0), r"client 'site1'.*num-examples is 0"),
        (lambda: _reply(metrics={"loss": float("nan")}), r"client 'site1'.*loss is nan"),
        (lambda: _reply(bloom_bits=None), r"client 'site1'.*none came back"),
        (lambda: _reply(bloom_bits=np.zeros(3, np.uint8)), r"Bloom filter has 3 bytes"),
        (
            lambda: _reply(parameters={**_params(1), "rare.input.weight": np.zeros((3, 6))}),
            r"client 'site1'.*'rare.input.weight' has shape \(3, 6\), expected \(3, 7\)",
        ),
        (
            lambda: _reply(parameters={**_params(1), "head.bias": np.array([np.inf], np.float32)}),
            r"client 'site1'.*'head.bias' holds 1 NaN/inf",
        ),
        (
            lambda: _reply(parameters={k: v.astype(np.float64) for k, v in _params(1).items()}),
            r"dtype float64, expected float32",
        ),
        (
            lambda: _reply(parameters={k: v for k, v in _params(1).items() if k != "head.bias"}),
            r"tensors missing \['head.bias'\]",
        ),
        (
            lambda: RecordDict({"meta": ConfigRecord({"client-id": "site1"})}),
            r"client 'site1'.*no 'parameters' record",
        ),
    ],
)
def test_malformed_replies_rejected_naming_the_client(content, match):
    with pytest.raises(MalformedReplyError, match=match):
        reply_to_fit_result(content(), client_id="site1", expected=_params(), bloom=BLOOM)


def test_reply_without_bloom_accepted_when_none_asked():
    result = reply_to_fit_result(
        _reply(bloom_bits=None), client_id="site1", expected=_params(), bloom=None
    )
    assert result.bloom_bits is None


def test_shipped_app_matches_the_launcher(tmp_path):
    shipped = Path(__file__).resolve().parents[1] / "flower_app" / "pyproject.toml"
    assert shipped.read_text() == APP_PYPROJECT
    import tomli
    from flwr.common.config import validate_fields_in_config

    config = tomli.loads((write_app(tmp_path) / "pyproject.toml").read_text())
    valid, errors, _ = validate_fields_in_config(config)
    assert valid and errors == []
    assert config["tool"]["flwr"]["app"]["components"]["serverapp"].endswith("server_app:app")


def test_job_min_replies_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"min_replies must be in \[1, 3\].*got 5"):
        write_job(
            tmp_path / "job.json",
            config={},
            strategy="fedavg",
            rounds=1,
            seed=1,
            out=tmp_path,
            n_rare=3,
            expected_clients=3,
            min_replies=5,
        )
    path = write_job(
        tmp_path / "job.json",
        config={"train": {}},
        strategy="fedavg",
        rounds=2,
        seed=1,
        out=tmp_path,
        n_rare=3,
        expected_clients=3,
    )
    assert json.loads(path.read_text())["min_replies"] == 3
