"""SuperNodes killed at each exchange of a secure round: right sums, the lost named, a clear stop.

A real deployment on 127.0.0.1 — a SuperLink and six SuperNodes, one per site of a small
synthetic federation — trains FedAvg for two rounds with ``secagg.enabled`` (threshold
t = max(3, ⌊n/2⌋ + 1): 3 of 5 members) and ``min_replies: 3`` through ``rvfedprs.run.train``
(so the run writes ``metrics.json``). In round 1 three SuperNodes are killed with SIGKILL (each
by the pid the launcher recorded), each at another exchange:

- ``client02`` as it receives the ``train`` message (``train.1``): it never replies to the
  fit, so it is out before the key exchange;
- ``client03`` in the share-keys step (``secagg.share``): it sent its public keys, never its
  shares, so no member masks with it and it is out of the sum;
- ``client04`` in the unmask step (``secagg.unmask``), after it sent its masked update: the
  server rebuilds its self-mask seed from three other members' shares (t = 3), so its update is
  in the sum (SecAgg's rule: a vector that arrived counts) and it is named as a fault.

Round 2 goes on with the three sites left. The model of each round must equal the one computed
here with numpy from the summed sites' own updates (each site's round retrained here on its
data from the round's checkpointed model, weighted, clipped, quantised with its seed and
summed), and not the one with the killed sites' updates added or removed; the killed sites are
named in each round's record, in ``metrics.json`` and in the job's status.

A second run on the same deployment, over the three sites left, loses ``client05`` in the
masking step (``secagg.mask``): 2 of 3 members, below t = 3, so the run stops with an error
naming it and the threshold, nothing unmasked.

A site answers a step in milliseconds to seconds, too fast to kill it reliably from its log:
the test freezes it there with the test hook of :mod:`rvfedprs.federation.freeze`
(:data:`~rvfedprs.federation.freeze.FREEZE_DIR_ENV`) and kills its SuperNode once it says
it has reached the step.

A study on a second loopback deployment — four SuperNodes, each given only its own site's
configuration, counts summed securely (t = 3), one round, ``min_replies: 2`` — loses a node in
preparation and another in federated evaluation. The first is frozen and killed in the share
step of the secure sum of the counts: it is left out of the study (``study.json``'s
``left_out``: "secure sum of counts: secagg.share: …"), asked for no features, no moments, no
training, no evaluation. The second is frozen before it answers round 1's evaluation (round 1
is checkpointed by then: the checkpoint is written first) and killed: named in round 1's
``evaluation_failed`` and in the run's ``evaluation_failures`` (round 1 and the final
evaluation), the pooled metrics over the two sites left. (The training deployment above is a
``train`` run over prepared folders, not a study: its nodes hold no site inputs, so the study
needs its own.)

A third deployment runs a study with its counts sent in the clear and ``min_replies: 1``: one
node is frozen and killed before it answers ``counts``, another before ``features`` and a third
before the run's ``moments``. Each is named with its step in ``left_out`` and is out of the
study's ``sites``; the one site left trains and is evaluated.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _flower_processes import (  # noqa: E402
    alive,
    in_thread,
    kill_frozen,
    processes_using,
    site_nodes,
)
from test_snakemake import SMALL_COHORT  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.federation.flower.processes import FlowerRunError  # noqa: E402
from rvfedprs.federation.flower.superlink import start_local  # noqa: E402
from rvfedprs.federation.freeze import FREEZE_DIR_ENV, freeze_file  # noqa: E402
from rvfedprs.federation.secagg.protocol import (  # noqa: E402
    STEP_MASK,
    STEP_SHARE,
    STEP_UNMASK,
    SecAggParams,
    clip_to_range,
    dequantize_sum,
    quantize_seeded,
)
from rvfedprs.federation.seeds import client_seed, derive_seed, initial_seed  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import plan as genomic_plan  # noqa: E402
from rvfedprs.genomic.task import (  # noqa: E402
    GenomicTask,
    client_nodes,
    genomic_settings,
    sites_of,
    training_config,
)
from rvfedprs.plan import run as run_plan  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 17
ROUNDS = 2
SITES = 6
MIN_REPLIES = 3
#: Seconds an exchange waits for its replies: long enough for a ClientApp to start on a loaded
#: 2-core host (under load Flower may start one twice: a first process that connects late
#: finds its task token expired), short enough that a killed node is given up quickly.
ROUND_TIMEOUT = 120.0
#: Killed in round 1 as it receives the train message.
VICTIM = "client02"
#: Killed in round 1 at these steps, in this order (frozen there first): the victim before it
#: trains, the others at secure-aggregation steps.
FROZEN = {VICTIM: "train.1", "client03": STEP_SHARE, "client04": STEP_UNMASK}
#: Killed in the second run's masking step, with two sites left beside it.
LAST = ("client05", STEP_MASK)
#: Why a killed node's site failed: the SuperLink's error reply for a node whose heartbeats
#: stopped (once it has noticed), or no reply within the exchange's timeout (before it has).
LOST = rf"(error 5: Error: Node Unavailable[^']*|no reply within {ROUND_TIMEOUT} s)"
KILLED = list(FROZEN)


def _config(data: Path, rounds: int) -> dict:
    return load_config(
        None,
        overrides={
            "train": {
                "strategy": "fedavg",
                "rounds": rounds,
                "seed": SEED,
                "data": str(data),
                "engine": "flower-deploy",
                "keep_checkpoints": 0,  # every round's: each round's model is checked
                "progress": False,
                "validation_fraction": 0,  # the numpy reference trains on every sample
            },
            "flower": {
                "min_replies": MIN_REPLIES,
                "round_timeout": ROUND_TIMEOUT,
                "timeout": 900,
            },
            "secagg": {"enabled": True},
            "model": {"start_from_floor": False},
        },
    )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault")
    data = write_federation(
        root,
        n_clients=SITES,
        n_clusters=1,
        samples_per_client=80,
        private_per_cluster=5,
        n_shared=6,
        causal_private=2,
        causal_shared=2,
    )["data"]
    federation = load_federation(data)
    freeze = root / "freeze"
    freeze.mkdir()
    for site, step in FROZEN.items():
        freeze_file(freeze, site, step).touch()
    out: dict = {"federation": federation, "run": root / "run", "second": root / "second"}
    kills: dict = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FREEZE_DIR_ENV, str(freeze))  # every SuperNode's environment
        with start_local(
            root / "deploy",
            simulation=False,
            nodes=client_nodes(data, federation.client_ids),
            clientapp="warm",  # as sites run them (flower.clientapp's default)
        ) as link:
            pids = link.processes.pids()
            out["pids"] = list(pids.values())
            first: dict = {}
            started = time.monotonic()
            runner = in_thread(train, first, _config(data, ROUNDS), out["run"], superlink=link)
            for site, step in FROZEN.items():
                kill_frozen(freeze, site, step, pids, runner, kills)
            out["others_alive"] = [
                alive(pids[f"supernode-{c}"]) for c in federation.client_ids if c not in kills
            ]
            runner.join(timeout=900)
            out["first_seconds"] = time.monotonic() - started

            site, step = LAST
            freeze_file(freeze, site, step).touch()
            second: dict = {}
            started = time.monotonic()
            # the three sites left (the killed nodes are offline by now: not waited for)
            plan = replace(
                genomic_plan(_config(data, 1), out["second"]),
                superlink=link,
                expected_nodes=SITES - len(KILLED),
            )
            runner = in_thread(run_plan, second, plan)
            kill_frozen(freeze, site, step, pids, runner, kills)
            runner.join(timeout=600)
            out["second_seconds"] = time.monotonic() - started
            out["killed_alive"] = [alive(pids[f"supernode-{c}"]) for c in kills]
    if "error" in first:
        raise first["error"]
    assert all(kills.values()), f"not every node reached the step it was to be killed at: {kills}"
    assert "result" in first, "the first run had not finished 900 s after it started"
    out["result"] = first["result"]
    out["second_error"] = second.get("error")
    out["home"] = (root / "deploy" / "home").resolve()
    print(
        f"fault suite: first run {out['first_seconds']:.0f} s, "
        f"second run {out['second_seconds']:.0f} s"
    )
    return out


def _global(run: Path, server_round: int) -> dict[str, np.ndarray]:
    return load_checkpoint(checkpoint_path(run, server_round))["strategy_state"]["parameters"]


def _numpy_model(federation, config, before, server_round, repliers, summed):
    """w + Σ_{k ∈ summed} deq(q_k) / Σ_{k ∈ summed} ω_k, with q_k site k's weighted update
    ω_k Δw_k clipped to ±c and quantised with its seed: what the secure sum must give.

    Each site's update is its round retrained here, on its own data, from ``before`` (the
    model it was sent) with its round seed; ω_k = n_k / Σ_{repliers} n.
    """
    task, sites = GenomicTask(), sites_of(federation)
    settings = genomic_settings(
        federation, model_config=config["model"], training=training_config(config, federation)
    )
    strategy = strategy_from_config("fedavg", config)
    strategy.initialize(dict(before), federation.client_ids)
    instructions = strategy.configure_fit(server_round, sorted(repliers))
    names = sorted(before)
    params = SecAggParams.from_config(config["secagg"])
    round_seed = derive_seed(SEED, "secagg", 0, server_round)  # the job's one run: index 0
    updates, n = {}, {}
    for client in sorted(repliers):
        result = task.fit(
            instructions[client],
            sites[client],
            settings,
            {},
            random_seed=client_seed(SEED, server_round, client),
        )
        n[client] = float(result.n_samples)
        updates[client] = np.concatenate(
            [
                np.ravel(np.asarray(result.parameters[k], np.float64) - np.asarray(before[k]))
                for k in names
            ]
        )
    weight = {c: n[c] / sum(n.values()) for c in n}
    total = sum(
        quantize_seeded(
            clip_to_range(weight[c] * updates[c], params)[0],
            params,
            derive_seed(round_seed, "model", c),
        )
        for c in sorted(summed)
    )
    mean = dequantize_sum(total, len(summed), params) / sum(weight[c] for c in summed)
    model, start = {}, 0
    for k in names:
        w = np.asarray(before[k])
        model[k] = (w.astype(np.float64) + mean[start : start + w.size].reshape(w.shape)).astype(
            w.dtype
        )
        start += w.size
    bound = len(summed) * params.step / sum(weight[c] for c in summed)
    return model, bound


def _gap(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k], np.float64) - b[k]))) for k in a)


@pytest.mark.parametrize(
    ("server_round", "repliers", "summed"),
    [
        # client02 lost at the fit, client03 at the share step; client04's vector arrived
        (1, ["client00", "client01", "client03", "client04", "client05"],
         ["client00", "client01", "client04", "client05"]),
        (2, ["client00", "client01", "client05"], ["client00", "client01", "client05"]),
    ],
)  # fmt: skip
def test_each_rounds_model_is_the_numpy_sum_of_the_summed_sites_updates(
    deployment, server_round, repliers, summed
):
    federation, run = deployment["federation"], deployment["run"]
    config = _config(federation.data_dir, ROUNDS)
    if server_round == 1:
        settings = genomic_settings(
            federation,
            model_config=config["model"],
            training=training_config(config, federation),
        )
        before = GenomicTask().initial_parameters(settings, initial_seed(SEED))
    else:
        before = _global(run, server_round - 1)
    got = _global(run, server_round)
    want, bound = _numpy_model(federation, config, before, server_round, repliers, summed)
    # within the quantisation bound (a site's update, retrained in another process, may round
    # one level apart) and one float32 step
    assert _gap(got, want) <= bound + 1e-7, (_gap(got, want), bound)
    if server_round == 1:
        # not the sum with the unmask-killed site left out, nor with the share-killed one added
        without, _ = _numpy_model(
            federation, config, before, 1, repliers, [c for c in summed if c != "client04"]
        )
        added, _ = _numpy_model(federation, config, before, 1, repliers, [*summed, "client03"])
        assert _gap(got, without) > 20 * bound and _gap(got, added) > 20 * bound


def test_the_killed_sites_are_named_in_each_rounds_record(deployment):
    result = deployment["result"]
    assert not any(deployment["killed_alive"]) and all(deployment["others_alive"])
    assert [e["round"] for e in result.history] == list(range(1, ROUNDS + 1))
    first, second = result.history
    assert sorted(first["failed"]) == [VICTIM, "client03"], first
    assert re.fullmatch(LOST, first["failed"][VICTIM]), first
    # the share-killed site: out of the sum, named with the step it was lost at
    assert re.fullmatch(
        rf"secure aggregation: {re.escape(STEP_SHARE)}: {LOST}", first["failed"]["client03"]
    ), first
    # the unmask-killed site: its update is in the sum, its silence a fault
    assert first["secagg"] == {"model": ["client00", "client01", "client04", "client05"]}
    assert list(first["secagg_faults"]) == ["client04"], first
    assert re.fullmatch(rf"{re.escape(STEP_UNMASK)}: {LOST}", first["secagg_faults"]["client04"])
    # round 2: the three killed sites lost at the fit, the sum over the three left
    assert sorted(second["failed"]) == sorted(KILLED), second
    assert all(re.fullmatch(LOST, why) for why in second["failed"].values()), second
    assert second["secagg"] == {"model": ["client00", "client01", "client05"]}
    assert "secagg_faults" not in second


def test_metrics_json_and_the_status_name_the_killed_sites(deployment):
    run = deployment["run"]
    metrics = json.loads((run / "metrics.json").read_text())
    history = deployment["result"].history
    assert [e.get("failed") for e in metrics["history"]] == [e.get("failed") for e in history]
    assert metrics["history"][0]["secagg_faults"] == history[0]["secagg_faults"]
    status = json.loads((run / "flower" / "status.json").read_text())
    assert status["status"] == "completed"
    assert status["failures"] == {str(e["round"]): e["failed"] for e in history}


def test_every_rounds_checkpoint_names_the_killed_sites(deployment):
    for server_round in range(1, ROUNDS + 1):
        record = load_checkpoint(checkpoint_path(deployment["run"], server_round))
        assert record["round"] == server_round
        assert VICTIM in record["history"][server_round - 1]["failed"]
        assert "client04" in json.dumps(record["history"])


def test_below_the_threshold_the_run_stops_naming_the_lost_site_and_the_threshold(deployment):
    error = deployment["second_error"]
    assert isinstance(error, FlowerRunError), error
    site, step = LAST
    assert re.search(
        r"round 1: secure aggregation of 'model': only 2 of 3 members sent valid masked "
        rf"vectors, fewer than the threshold 3; nothing was unmasked\. Dropped: "
        rf"\{{'{site}': '{re.escape(step)}: {LOST}'\}}",
        str(error),
    ), error
    assert not list((deployment["second"] / "checkpoints").glob("*"))


def test_no_process_of_the_deployment_is_left(deployment):
    assert len(deployment["pids"]) >= 1 + SITES  # the SuperLink and the SuperNodes
    assert [pid for pid in deployment["pids"] if alive(pid)] == []
    assert processes_using(deployment["home"]) == []


# --- a study: a node killed in the secure sum of the counts, another in an evaluation ----------
#: The study's run and its one round: round 1's evaluation, then the final one.
STUDY_RUN = "fedavg"
STUDY_MIN_REPLIES = 2


def _study_config(out: Path, counts: str = "secure", min_replies: int = STUDY_MIN_REPLIES) -> dict:
    """Four sites, counts summed securely (t = 3) or sent ``plain``, one round,
    ``min_replies`` (2 unless given)."""
    return load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            "model": {"start_from_floor": False},
            "train": {"rounds": 1, "seed": 3, "compare": [STUDY_RUN], "progress": False,
                      "validation_fraction": 0},
            "evaluate": {"truth": None, "samples": None},
            "flower": {"round_timeout": ROUND_TIMEOUT, "timeout": 1500},
            "study": {"enabled": True, "engine": "flower-deploy", "out": str(out),
                      "sites_dir": str(out / "sites"), "count_aggregation": counts,
                      "min_replies": min_replies},
        },
    )  # fmt: skip


def _killed_study(
    study_inputs: Path,
    root: Path,
    *,
    counts: str,
    frozen: dict[str, str],
    min_replies: int = STUDY_MIN_REPLIES,
) -> dict:
    """A study on one warm SuperNode per site (each given only its own site's configuration),
    counts summed ``secure`` or sent ``plain``, ``min_replies``. Each site of ``frozen``
    (site → step, in order) is killed once the test hook has frozen it at its step.

    Returns ``sites``, ``out``, ``pids``, ``alive`` (site → its node alive at the end),
    ``seconds``, ``summary`` (what the study returned) and ``home`` (the deployment's
    FLWR_HOME).
    """
    sheet = study_inputs / "sites" / "samplesheet.tsv"
    inputs = read_samplesheet(sheet)
    sites = sorted(inputs)
    out = root / "study"
    nodes = site_nodes(inputs, sites, out / "sites", root / "node")
    freeze = root / "freeze"
    freeze.mkdir()
    for site, step in frozen.items():
        freeze_file(freeze, site, step).touch()
    got: dict = {"sites": sites, "out": out}
    kills: dict = {}
    done: dict = {}
    scores = study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz"
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FREEZE_DIR_ENV, str(freeze))
        with start_local(root / "deploy", simulation=False, nodes=nodes, clientapp="warm") as link:
            pids = link.processes.pids()
            got["pids"] = list(pids.values())
            started = time.monotonic()
            runner = in_thread(
                run_study_config, done, _study_config(out, counts, min_replies),
                scoring_file=scores,
                samplesheet=sheet, superlink=link,
            )  # fmt: skip
            for site, step in frozen.items():
                kill_frozen(freeze, site, step, pids, runner, kills)
            runner.join(timeout=1500)
            got["seconds"] = time.monotonic() - started
            got["alive"] = {s: alive(pids[f"supernode-{s}"]) for s in sites}
    if "error" in done:
        raise done["error"]
    assert all(kills.values()), f"not every node reached the point it was to be killed at: {kills}"
    assert "result" in done, "the study had not finished 1500 s after it started"
    got["summary"] = done["result"]
    got["home"] = (root / "deploy" / "home").resolve()
    return got


@pytest.fixture(scope="module")
def study_deployment(study_inputs, tmp_path_factory):
    """A study on four SuperNodes: one killed frozen in the counts' ``secagg.share``, another
    frozen before it answers round 1's evaluation (after round 1 is checkpointed: the
    checkpoint is written first)."""
    sites = sorted(read_samplesheet(study_inputs / "sites" / "samplesheet.tsv"))
    prep, evaluation = sites[1], sites[2]

    got = _killed_study(
        study_inputs,
        tmp_path_factory.mktemp("fault-study"),
        counts="secure",
        frozen={prep: STEP_SHARE, evaluation: "evaluate"},
    )
    print(f"fault suite: the study {got['seconds']:.0f} s")
    return {**got, "prep": prep, "evaluation": evaluation}


def test_a_site_killed_in_the_secure_sum_of_the_counts_is_left_out_of_the_study(
    study_deployment,
):
    got = study_deployment
    prep, out = got["prep"], got["out"]
    kept = [s for s in got["sites"] if s != prep]
    written = json.loads((out / "study.json").read_text())
    for summary in (got["summary"], written):
        assert summary["sites"] == kept
        assert list(summary["left_out"]) == [prep], summary["left_out"]
        assert re.fullmatch(
            rf"secure sum of counts: {re.escape(STEP_SHARE)}: {LOST}", summary["left_out"][prep]
        ), summary["left_out"]
    # it never comes back: no features built there, not trained, not evaluated
    assert not (out / "sites" / prep / "prepared" / "features.request").exists()
    for site in kept:
        assert (out / "sites" / site / "prepared" / "features.request").is_file()
    assert sorted(pd.read_csv(out / "clients.tsv", sep="\t")["client"]) == kept
    metrics = json.loads((out / "train" / STUDY_RUN / "metrics.json").read_text())
    assert metrics["traffic"]["fit"]["messages"] == len(kept)  # round 1 asked the three left
    assert prep not in json.dumps(metrics["history"])


def test_a_site_killed_before_an_evaluation_is_named_and_the_rest_are_pooled(study_deployment):
    got = study_deployment
    lost, out = got["evaluation"], got["out"]
    evaluated = [s for s in got["sites"] if s not in (got["prep"], lost)]
    run = json.loads((out / "study.json").read_text())["runs"][STUDY_RUN]
    assert run["failures"] == {}  # it trained round 1 before it was killed
    assert sorted(run["evaluation_failures"]) == ["1", "final"], run["evaluation_failures"]
    for failed in run["evaluation_failures"].values():
        assert list(failed) == [lost] and re.fullmatch(LOST, failed[lost]), failed
    assert run["evaluated_sites"] == evaluated
    metrics = json.loads((out / "train" / STUDY_RUN / "metrics.json").read_text())
    assert metrics["evaluated_sites"] == evaluated and sorted(metrics["client_auc"]) == evaluated
    (record,) = metrics["history"]
    assert list(record["evaluation_failed"]) == [lost], record
    assert load_checkpoint(checkpoint_path(out / "train" / STUDY_RUN, 1))["round"] == 1


def test_no_process_of_the_study_deployment_is_left_and_only_the_killed_nodes_died(
    study_deployment,
):
    got = study_deployment
    # every node was up until the deployment closed, but the two killed
    assert {s for s, up in got["alive"].items() if not up} == {got["prep"], got["evaluation"]}
    assert [pid for pid in got["pids"] if alive(pid)] == []
    assert processes_using(got["home"]) == []


# --- a study in the clear: nodes killed at the counts, features and moments exchanges ---------
#: Killed frozen at these steps, in this order, of a study whose counts are sent in the clear
#: (site index → step); ``min_replies: 1``, so the one site left trains and is evaluated.
IN_THE_CLEAR = {0: "counts", 3: "features", 1: "moments"}


@pytest.fixture(scope="module")
def clear_study(study_inputs, tmp_path_factory):
    """A study on four SuperNodes, counts in the clear: one node killed frozen before it answers
    the ``counts`` exchange, another before ``features``, a third before the run's ``moments``;
    one site goes on."""
    sites = sorted(read_samplesheet(study_inputs / "sites" / "samplesheet.tsv"))
    return _killed_study(
        study_inputs,
        tmp_path_factory.mktemp("fault-clear"),
        counts="plain",
        frozen={sites[index]: step for index, step in IN_THE_CLEAR.items()},
        min_replies=1,
    )


def test_sites_killed_at_the_counts_features_and_moments_exchanges_are_left_out(clear_study):
    got = clear_study
    out, sites = got["out"], got["sites"]
    killed = {sites[index]: step for index, step in IN_THE_CLEAR.items()}
    kept = [s for s in sites if s not in killed]
    written = json.loads((out / "study.json").read_text())
    for summary in (got["summary"], written):
        assert summary["sites"] == kept
        assert sorted(summary["left_out"]) == sorted(killed), summary["left_out"]
        for site, step in killed.items():
            assert re.fullmatch(rf"{step}: {LOST}", summary["left_out"][site]), summary
    lost = {step: site for site, step in killed.items()}
    # lost at counts: never asked for features; lost at features: it had answered the counts
    # (its frozen ClientApp, let go once its node is dead, may still write its own features:
    # nothing of them reaches the study, as the tables and records below show); lost at the
    # run's moments: its features are in the study's table, it is neither trained nor evaluated
    assert not (out / "sites" / lost["counts"] / "prepared" / "features.request").exists()
    assert (out / "sites" / lost["features"] / "logs" / "counts.request").is_file()
    prepared = sorted([*kept, lost["moments"]])
    for site in prepared:
        assert (out / "sites" / site / "prepared" / "features.request").is_file()
    assert sorted(pd.read_csv(out / "clients.tsv", sep="\t")["client"]) == prepared
    metrics = json.loads((out / "train" / STUDY_RUN / "metrics.json").read_text())
    assert metrics["traffic"]["fit"]["messages"] == len(kept)
    assert metrics["evaluated_sites"] == kept and sorted(metrics["client_auc"]) == kept
    assert not any(site in json.dumps(metrics["history"]) for site in killed)


def test_no_process_of_the_clear_study_is_left_and_only_the_killed_nodes_died(clear_study):
    got = clear_study
    killed = {got["sites"][index] for index in IN_THE_CLEAR}
    assert {s for s, up in got["alive"].items() if not up} == killed
    assert [pid for pid in got["pids"] if alive(pid)] == []
    assert processes_using(got["home"]) == []
