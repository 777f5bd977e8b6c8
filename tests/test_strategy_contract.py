"""The contract every registered strategy keeps (scikit-learn's ``check_estimator`` is the model).

Each strategy of the registry is run by the real in-process engine and the real genomic task on
one small simulated federation (6 sites in 2 ancestry clusters) and must:

- once initialised, give every client an instruction from finite arrays of the starting
  model's shapes and dtypes, with a configuration a Flower message carries unchanged;
- give every client a model of finite arrays after each run (:func:`check_models`), and keep
  the shapes and dtypes it started from where it trains the network it was given;
- be invariant to the order in which the clients' replies arrive (a transport that trains the
  sites and returns their replies in reverse order gives the same server state);
- be deterministic under a seed (two runs with one seed: the same state);
- round-trip its state (``state_dict`` → a fresh instance's ``load_state_dict`` → the same
  ``state_dict`` and the same model for every client), through a saved checkpoint too;
- resume: one round, stopped, resumed to two rounds equals two rounds uninterrupted;
- with secure aggregation, where it declares it can (``secagg_refusal is None``), equal the
  plain run within the quantisation bound (clients' updates are rounded to 2c/R, so a model
  sum of K clients is off by at most K·2c/R, times what the server step amplifies it by:
  :func:`amplification`); one that declares it cannot says why.

A new strategy is checked the day it is registered: :func:`test_a_strategy_added_with_one_class
_and_one_registration_passes_the_contract` registers a toy one, runs the whole suite on it, and
unregisters it; :func:`test_the_contract_catches_a_strategy_that_depends_on_reply_order` shows a
breach is caught. The federation is small enough (22 rare variants) for every strategy, the
Newton fits included, to run every check in well under a minute in all.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint  # noqa: E402
from rvfedprs.federation.flower.records import decode_config, encode_config  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import RunSpec, serve  # noqa: E402
from rvfedprs.federation.secagg.protocol import SecAggParams  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import genomic_settings  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of, training_config  # noqa: E402
from rvfedprs.strategies import (  # noqa: E402
    DISTANCE_STRATEGIES,
    register_strategy,
    strategy_class,
    strategy_from_config,
    strategy_names,
    unregister_strategy,
)
from rvfedprs.strategies.fedavg import FedAvg  # noqa: E402

SEED = 5
N_CLIENTS = 6


def amplification(name: str, config) -> float:
    """How far a strategy's first server step scales the secure sum's rounding (1: not at all).

    FedAdam's round 1 sets w += η(1−β1)δ / (√(1−β2)|δ| + τ), whose slope in δ is at most
    η(1−β1)/τ.
    """
    if name == "fedadam":
        train = config["train"]
        return train["server_lr"] * (1 - train["server_beta1"]) / train["server_tau"]
    return 1.0


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    paths = write_federation(
        tmp_path_factory.mktemp("contract"),
        n_clients=N_CLIENTS,
        n_clusters=2,
        samples_per_client=60,
        private_per_cluster=8,
        n_shared=6,
        causal_private=3,
        causal_shared=2,
    )
    return load_federation(paths["data"])


def _config(fed, name: str, *, secure: bool = False, rounds: int = 2, seed: int = SEED):
    return load_config(
        None,
        overrides={
            "train": {
                "validation_fraction": 0,
                "strategy": name,
                "rounds": rounds,
                "seed": seed,
                "momentum": 0.0,  # SCAFFOLD's plain local SGD; the same for every strategy
                "data": str(fed.data_dir),
            },
            "model": {"common_hidden": [4], "rare_hidden": [4], "start_from_floor": False},
            "fedce": {"n_clusters": 2},
            "fedglm": {"top_k": 10},  # of the federation's 22 rare variants
            "secagg": {"enabled": secure},
        },
    )


def _build(fed, name: str, config):
    context: dict = {}
    if name in DISTANCE_STRATEGIES:
        d = np.add.outer(np.arange(float(N_CLIENTS)), np.arange(float(N_CLIENTS))) % 4
        np.fill_diagonal(d, 0)
        context = {"distance": d, "distance_clients": fed.client_ids}
    if name == "fedce_oracle":
        context = {"clusters": {c: f"g{i // 3}" for i, c in enumerate(fed.client_ids)}}
    return strategy_from_config(name, config, **context)


def reversing(strategy):
    """``strategy`` handed every round's results in reverse order (the engine sorts them).

    The instance's class becomes a subclass whose ``aggregate_fit`` / ``aggregate_sums``
    reverse the results before the strategy's own: its server state must not change.
    """
    base = type(strategy)

    class Reversing(base):
        def aggregate_fit(self, server_round, results):
            return base.aggregate_fit(self, server_round, list(results)[::-1])

        def aggregate_sums(self, server_round, results, sums):
            return base.aggregate_sums(self, server_round, list(results)[::-1], sums)

    strategy.__class__ = Reversing
    return strategy


class Reversed(InProcessTransport):
    """The in-process engine, training the sites and returning their replies in reverse order."""

    def subset(self, client_ids):  # noqa: D102
        out = Reversed(self.task, {c: self.sites[c] for c in client_ids})
        out.step_state = {c: self.step_state[c] for c in client_ids}
        return out

    def pooled(self, task):  # noqa: D102
        base = super().pooled(task)
        return Reversed(task, base.sites)

    @staticmethod
    def _reverse(mapping: Mapping) -> dict:
        return dict(reversed(list(mapping.items())))

    def query(self, requests, settings):  # noqa: D102
        replies, failures = super().query(self._reverse(requests), settings)
        return self._reverse(replies), self._reverse(failures)

    def fit(self, server_round, instructions, seeds, settings, client_state):  # noqa: D102
        results, failures = super().fit(
            server_round, self._reverse(instructions), seeds, settings, client_state
        )
        return self._reverse(results), self._reverse(failures)


def _run(fed, name, *, secure=False, rounds=2, seed=SEED, out=None, resume=False, reverse=False):
    """One run of strategy ``name``: its result (``.strategy``: the server's final state)."""
    config = _config(fed, name, secure=secure, rounds=rounds, seed=seed)
    task = GenomicTask()
    transport = (Reversed if reverse else InProcessTransport)(task, sites_of(fed))
    settings = genomic_settings(
        fed, model_config=config["model"], training=training_config(config, fed)
    )
    job = {"seed": seed, "rounds": rounds, "config": config, "resume": resume}
    strategy = _build(fed, name, config)
    if reverse:
        reversing(strategy)
    return serve(task, transport, [RunSpec(strategy, out=out)], job, settings)[0]


def models(strategy, client_ids) -> dict[str, dict[str, np.ndarray]]:
    """Every client's model (a pooled strategy's clients all get the one model)."""
    return {
        c: {k: np.asarray(v) for k, v in strategy.parameters_for(c).items()} for c in client_ids
    }


def check_models(found: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Every client has a non-empty model of finite, numeric arrays."""
    for client, params in found.items():
        assert params, f"client {client}: empty model"
        for key, value in params.items():
            assert np.issubdtype(value.dtype, np.number), (client, key, value.dtype)
            assert np.all(np.isfinite(value)), f"client {client} {key}: not finite"


def _leaves(state, prefix=""):
    """(path, value) of every leaf of a state dict (arrays, numbers, strings, None)."""
    if isinstance(state, Mapping):
        for key in sorted(state, key=str):
            yield from _leaves(state[key], f"{prefix}/{key}")
    elif isinstance(state, list | tuple):
        for i, value in enumerate(state):
            yield from _leaves(value, f"{prefix}[{i}]")
    else:
        yield prefix, state


def assert_same_state(a, b, label: str, *, atol: float = 0.0) -> None:
    """Two state dicts hold the same leaves, equal (within ``atol`` for float arrays)."""
    left, right = dict(_leaves(a)), dict(_leaves(b))
    assert sorted(left) == sorted(right), f"{label}: {sorted(set(left) ^ set(right))}"
    for path, x in left.items():
        y = right[path]
        if isinstance(x, np.ndarray | np.generic) or isinstance(y, np.ndarray | np.generic):
            x, y = np.asarray(x), np.asarray(y)
            assert x.shape == y.shape, f"{label} {path}: shape {x.shape} != {y.shape}"
            if atol and np.issubdtype(x.dtype, np.floating):
                np.testing.assert_allclose(x, y, rtol=0, atol=atol, err_msg=f"{label} {path}")
            else:
                np.testing.assert_array_equal(x, y, err_msg=f"{label} {path}")
        elif isinstance(x, float) and isinstance(y, float) and atol:
            assert abs(x - y) <= atol, f"{label} {path}: {x} != {y}"
        else:
            assert x == y or (x != x and y != y), f"{label} {path}: {x!r} != {y!r}"


STRATEGIES = strategy_names()

#: Plain runs, one per (federation, strategy, rounds, secure): read by several checks, never
#: changed (a check that needs a second run makes a fresh one).
_RUNS: dict[tuple, object] = {}


def _shared_run(fed, name, *, rounds=2, secure=False):
    key = (str(fed.data_dir), name, rounds, secure)
    if key not in _RUNS:
        _RUNS[key] = _run(fed, name, rounds=rounds, secure=secure)
    return _RUNS[key]


# --- the contract, one check per test ---------------------------------------------------------
def check_fit(fed, name):
    """After two rounds every client has a finite model; a network keeps its shapes and dtypes."""
    result = _shared_run(fed, name)
    found = models(result.strategy, fed.client_ids)
    check_models(found)
    assert len(result.history) >= 1 and all(np.isfinite(e["loss"]) for e in result.history)
    from rvfedprs.genomic.task import initial_parameters

    start = initial_parameters(fed.n_rare, _config(fed, name)["model"], SEED)
    for client, params in found.items():
        if set(params) == set(start):  # the network it was given: same tensors
            for key, value in params.items():
                assert value.shape == start[key].shape, (client, key)
                assert value.dtype == start[key].dtype, (client, key)


def check_initialize(fed, name):
    """initialize → configure_fit: one instruction per client, from finite arrays of w^0's
    shapes and dtypes, with a configuration a Flower message carries unchanged."""
    from rvfedprs.genomic.task import initial_parameters

    start = initial_parameters(fed.n_rare, _config(fed, name)["model"], SEED)
    strategy = _build(fed, name, _config(fed, name))
    strategy.initialize(start, fed.client_ids)
    instructions = strategy.configure_fit(1, fed.client_ids)
    assert sorted(instructions) == sorted(fed.client_ids), name
    for client, instruction in instructions.items():
        text, arrays = encode_config(instruction.config)  # what a Flower message carries
        assert_same_state(decode_config(text, arrays), instruction.config, f"{name} config")
        check_models({client: {k: np.asarray(v) for k, v in instruction.parameters.items()}})
        for key, value in instruction.parameters.items():
            if key in start:
                assert np.shape(value) == start[key].shape, (name, client, key)
                assert np.asarray(value).dtype == start[key].dtype, (name, client, key)


def check_order_invariance(fed, name):
    """Replies arriving, and handed to the strategy, in reverse order: the same server state."""
    plain, reversed_ = _shared_run(fed, name), _run(fed, name, reverse=True)
    assert_same_state(plain.strategy.state_dict(), reversed_.strategy.state_dict(), name)


def check_determinism(fed, name):
    """One seed, two runs: the same state."""
    first, second = _shared_run(fed, name), _run(fed, name)
    assert_same_state(first.strategy.state_dict(), second.strategy.state_dict(), name)


def check_state_round_trip(fed, name, tmp_path):
    """state_dict → a fresh instance → the same state and models, from a checkpoint too."""
    result = _run(fed, name, rounds=1, out=tmp_path)
    state = result.strategy.state_dict()
    fresh = _build(fed, name, _config(fed, name))
    fresh.load_state_dict(state)
    assert_same_state(state, fresh.state_dict(), f"{name} load_state_dict")
    assert_same_state(
        models(result.strategy, fed.client_ids), models(fresh, fed.client_ids), f"{name} models"
    )
    saved = load_checkpoint(latest_checkpoint(tmp_path))
    restored = _build(fed, name, _config(fed, name))
    restored.load_state_dict(saved["strategy_state"])
    assert_same_state(state, restored.state_dict(), f"{name} checkpoint")


def check_resume(fed, name, tmp_path):
    """One round, stopped, resumed to two equals two rounds uninterrupted."""
    whole = _shared_run(fed, name, rounds=2)
    _run(fed, name, rounds=1, out=tmp_path)
    resumed = _run(fed, name, rounds=2, out=tmp_path, resume=True)
    assert [e["round"] for e in resumed.history] == [e["round"] for e in whole.history]
    assert_same_state(whole.strategy.state_dict(), resumed.strategy.state_dict(), f"{name} resume")


def check_secagg(fed, name):
    """A secure run equals the plain one within the quantisation bound, or says why it can't."""
    refusal = strategy_class(name).secagg_refusal
    if refusal is not None:
        assert len(refusal) > 20, f"{name}: a refusal must say why"
        pytest.skip(f"{name} declares it cannot run with secure aggregation: {refusal}")
    plain = _shared_run(fed, name, rounds=1)
    secure = _run(fed, name, rounds=1, secure=True)
    bound = N_CLIENTS * SecAggParams().step * amplification(name, _config(fed, name))
    atol = bound + 2 * float(np.finfo(np.float32).eps)  # one float32 rounding of values ~1
    assert_same_state(
        models(plain.strategy, fed.client_ids),
        models(secure.strategy, fed.client_ids),
        f"{name} secure",
        atol=atol,
    )


# --- every registered strategy ----------------------------------------------------------------
@pytest.mark.parametrize("name", STRATEGIES)
def test_fit_gives_every_client_a_finite_model(fed, name):
    check_fit(fed, name)


@pytest.mark.parametrize("name", STRATEGIES)
def test_initialize_gives_every_client_an_instruction(fed, name):
    check_initialize(fed, name)


@pytest.mark.parametrize("name", STRATEGIES)
def test_the_order_of_replies_does_not_matter(fed, name):
    check_order_invariance(fed, name)


@pytest.mark.parametrize("name", STRATEGIES)
def test_one_seed_gives_one_run(fed, name):
    check_determinism(fed, name)


@pytest.mark.parametrize("name", STRATEGIES)
def test_state_round_trips_through_a_checkpoint(fed, name, tmp_path):
    check_state_round_trip(fed, name, tmp_path)


@pytest.mark.parametrize("name", STRATEGIES)
def test_a_resumed_run_equals_an_uninterrupted_one(fed, name, tmp_path):
    check_resume(fed, name, tmp_path)


@pytest.mark.parametrize("name", STRATEGIES)
def test_secure_aggregation_equals_the_plain_run_within_the_bound(fed, name):
    check_secagg(fed, name)


# --- a strategy a researcher adds ---------------------------------------------------------------
class HalfStep(FedAvg):
    """FedAvg with a server step of 1/2: w ← w + (Σ_k n_k/N w_k − w) / 2."""

    name = "half_step"

    def server_update(self, server_round, average):
        return {k: 0.5 * (self.parameters[k] + v) for k, v in average.items()}


def test_a_strategy_added_with_one_class_and_one_registration_passes_the_contract(fed, tmp_path):
    register_strategy("half_step", HalfStep)
    try:
        assert "half_step" in strategy_names()
        check_initialize(fed, "half_step")
        check_fit(fed, "half_step")
        check_order_invariance(fed, "half_step")
        check_determinism(fed, "half_step")
        check_state_round_trip(fed, "half_step", tmp_path / "trip")
        check_resume(fed, "half_step", tmp_path / "resume")
        check_secagg(fed, "half_step")
        # the half step is taken: the model lies half-way between w^0 and FedAvg's
        half, full = _run(fed, "half_step", rounds=1), _run(fed, "fedavg", rounds=1)
        assert not np.allclose(
            half.strategy.parameters["head.weight"], full.strategy.parameters["head.weight"]
        )
    finally:
        unregister_strategy("half_step")
    assert "half_step" not in strategy_names()


class Careless(FedAvg):
    """FedAvg that keeps the last reply it is handed: order-dependent, a contract breach."""

    name = "careless"

    def aggregate_fit(self, server_round, results):  # noqa: D102
        self.parameters = {k: np.asarray(v).copy() for k, v in results[-1].parameters.items()}


def test_the_contract_catches_a_strategy_that_depends_on_reply_order(fed):
    register_strategy("careless", Careless)
    try:
        with pytest.raises(AssertionError, match="careless"):
            check_order_invariance(fed, "careless")
    finally:
        unregister_strategy("careless")
