"""Strategy messages survive the trip through Flower records; bad replies are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from rvfedprs.bloom import BloomSpec, encode, n_bytes
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.job import APP_PYPROJECT, write_app, write_job
from rvfedprs.federation.flower.packing import pack_arrays, unpack_arrays
from rvfedprs.federation.flower.records import (
    PACKED,
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


def _mixed_arrays():
    """Every kind of tensor a message may carry: dtypes, byte orders, 0-d, empty, views."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(5, 6))
    weird = np.array([np.nan, -0.0, np.inf, 1e-310], np.float64)  # NaN, -0, inf, subnormal
    return {
        "w.f32": rng.normal(size=(3, 4)).astype(np.float32),
        "strided.f64": base[::2, 1::3],  # a non-contiguous view
        "fortran": np.asfortranarray(base.astype(np.float32)),
        "big.endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "odd.f64": weird,
        "u64": np.array([0, 2**64 - 1, 12345], np.uint64),
        "i8": np.array([-128, 0, 127], np.int8),
        "f16": rng.normal(size=7).astype(np.float16),
        "mask": np.array([True, False, True]),
        "scalar": np.array(2.5, np.float32),  # 0-d
        "empty": np.zeros((0,), np.float32),
        "empty.2d": np.zeros((3, 0), np.int64),
        "last": np.array([7], np.uint8),
    }


def test_packed_parameters_round_trip_bit_identical_over_the_wire():
    params = _mixed_arrays()
    back = record_to_parameters(
        _over_the_wire(RecordDict({"p": parameters_to_record(params)})).array_records["p"]
    )
    assert list(back) == list(params)  # same names, same order
    for key, want in params.items():
        got = back[key]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), key
        assert got.tobytes() == np.ascontiguousarray(want).tobytes(), key  # bit for bit
        assert got.flags.writeable, key


def test_a_parameters_record_holds_exactly_one_array():
    record = parameters_to_record(_mixed_arrays())
    assert list(record) == [PACKED] and record[PACKED].dtype == "uint8"
    content = instruction_to_content(
        FitInstruction(_params(), {"scaffold_correction": _params(2)}),
        server_round=1,
        seed=1,
        run={},
    )
    assert [len(content.array_records[k]) for k in ("parameters", "config-arrays")] == [1, 1]
    assert len(parameters_to_record({})) == 0 and record_to_parameters(ArrayRecord()) == {}


def test_packed_records_refused_when_damaged():
    packed = np.frombuffer(pack_arrays(_params()), np.uint8)
    with pytest.raises(ValueError, match=r"3 bytes left after the last array"):
        unpack_arrays(np.concatenate([packed, np.zeros(3, np.uint8)]))
    with pytest.raises(ValueError, match=r"array 'head.bias' float32 \(1,\) needs bytes"):
        unpack_arrays(packed[:-1])
    with pytest.raises(ValueError, match=r"header ends at byte"):
        unpack_arrays(packed[:20])
    with pytest.raises(TypeError, match=r"array 'x' has dtype object"):
        pack_arrays({"x": np.array([None])})
    per_tensor = ArrayRecord({k: Array(v) for k, v in _params().items()})
    with pytest.raises(
        ValueError, match=r"holds arrays \['common.0.weight'.*expected \['packed'\]"
    ):
        record_to_parameters(per_tensor)
    reply = _reply()
    reply["parameters"] = ArrayRecord({PACKED: Array(packed[:-1].copy())})
    with pytest.raises(MalformedReplyError, match=r"client 'site1'.*needs bytes"):
        reply_to_fit_result(reply, client_id="site1", expected=_params(), bloom=BLOOM)


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
        expected_clients=3,
    )
    assert json.loads(path.read_text())["min_replies"] == 3


def _over_the_wire(content: RecordDict) -> RecordDict:
    """What the other side gets: Flower's protobuf serialisation and back."""
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    proto = recorddict_to_proto(content)
    return recorddict_from_proto(type(proto).FromString(proto.SerializeToString()))


def _assert_same(got, want, where="config"):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, where
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, dict):
        assert set(got) == set(want), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    else:
        assert got == want and type(got) is type(want), where


@pytest.mark.parametrize("name", ["scaffold", "ditto", "fedce"])
def test_real_strategy_instructions_survive_flower(name):
    from rvfedprs.config import load_config
    from rvfedprs.strategies import strategy_from_config

    # SCAFFOLD Option II needs plain local SGD (momentum 0), which the registry enforces.
    overrides = {"fedce": {"top_k": None, "relative_threshold": 0.3}, "train": {"momentum": 0.0}}
    strategy = strategy_from_config(name, load_config(None, overrides=overrides))
    strategy.initialize(_params(), ["site1", "site2"])
    instruction = strategy.configure_fit(1, ["site1", "site2"])["site2"]
    content = instruction_to_content(instruction, server_round=1, seed=7, run={})
    back, _, _, _ = content_to_instruction(_over_the_wire(content))
    _assert_same(back.config, instruction.config)
    has_arrays = name in ("scaffold", "ditto")
    assert ("config-arrays" in content.array_records) == has_arrays
    if name == "fedce":
        assert back.config["top_k"] is None and back.config["relative_threshold"] == 0.3


def test_config_codec_nested_arrays_scalars_and_refusals():
    from rvfedprs.federation.flower.records import decode_config, encode_config

    config = {
        "a": None,
        "b": np.float32(0.25),
        "c": [{"x": np.arange(4, dtype=np.int64)}, 3],
        "d": {"e": {"f": np.ones((2, 2), np.float32)}},
    }
    text, arrays = encode_config(config)
    assert sorted(arrays) == ["c/0/x", "d/e/f"]
    back = decode_config(text, arrays)
    assert back["a"] is None and back["b"] == 0.25 and back["c"][1] == 3
    np.testing.assert_array_equal(back["c"][0]["x"], np.arange(4))
    assert back["d"]["e"]["f"].dtype == np.float32
    with pytest.raises(TypeError, match=r"config value at 'd/when' has type datetime"):
        import datetime

        encode_config({"d": {"when": datetime.datetime(2020, 1, 1)}})
    with pytest.raises(TypeError, match=r"reserved key '__array__'"):
        encode_config({"x": {"__array__": "y"}})


def test_ditto_personal_tensors_accepted_and_checked():
    personal = {f"personal/{k}": v + 1 for k, v in _params(1).items()}
    content = _reply(parameters={**_params(1), **personal})
    result = reply_to_fit_result(
        _over_the_wire(content), client_id="site1", expected=_params(), bloom=BLOOM
    )
    np.testing.assert_array_equal(
        result.parameters["personal/head.bias"], _params(1)["head.bias"] + 1
    )
    bad_shape = {**personal, "personal/head.bias": np.zeros(2, np.float32)}
    with pytest.raises(MalformedReplyError, match=r"'personal/head.bias' has shape \(2,\)"):
        reply_to_fit_result(
            _reply(parameters={**_params(1), **bad_shape}),
            client_id="site1",
            expected=_params(),
            bloom=BLOOM,
        )
    unknown = {**_params(1), "personal/other.weight": np.zeros(1, np.float32)}
    with pytest.raises(MalformedReplyError, match=r"unexpected \['personal/other.weight'\]"):
        reply_to_fit_result(
            _reply(parameters=unknown), client_id="site1", expected=_params(), bloom=BLOOM
        )


def test_flower_section_defaults_and_checks():
    from rvfedprs.config import load_config

    assert load_config(None)["flower"] == {
        "min_replies": None,
        "round_timeout": None,
        "node_wait": 60,
        "timeout": 3600,
        "superlink": None,
        "root_certificates": None,
        "clientapp": "warm",
        "ray_address": None,
        "node_keys": None,
        "node_poll_seconds": 0.25,
        "serverapp_patience_seconds": 180,
        "node_heartbeat_seconds": 10,
        "reply_poll_seconds": 0.1,
    }
    with pytest.raises(ConfigError, match=r"'flower.superlink': 'localhost' does not match"):
        load_config(None, overrides={"flower": {"superlink": "localhost"}})
    with pytest.raises(ConfigError, match=r"flower.min_replies"):
        load_config(None, overrides={"flower": {"min_replies": 0}})


def test_remote_superlink_refused_for_simulation(tmp_path):
    from _genomic_runs import run_flower

    from rvfedprs.config import load_config
    from rvfedprs.strategies import strategy_from_config

    config = load_config(None, overrides={"flower": {"superlink": "10.0.0.1:9093"}})
    with pytest.raises(ConfigError, match=r"flower.superlink \('10.0.0.1:9093'\) applies to"):
        run_flower(
            "flower-sim",
            federation=None,  # refused before the federation is looked at
            strategy=strategy_from_config("fedavg", config),
            config=config,
            rounds=1,
            random_seed=1,
            out=tmp_path,
        )
    assert not (tmp_path / "flower").exists()
