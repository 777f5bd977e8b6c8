"""The typed run plan (issue 28): built from a configuration by the task, run by ``run(plan)``."""

import dataclasses
import json

import numpy as np
import pytest
from _federation_fixtures import write_federation
from _genomic_runs import run_inprocess

from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint
from rvfedprs.genomic.data import load_federation
from rvfedprs.genomic.task import training_config
from rvfedprs.plan import Privacy, RunPlan, run, run_plans
from rvfedprs.run import train
from rvfedprs.strategies.fedavg import FedAvg
from rvfedprs.tasks import get_task


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("run_plan")
    info = write_federation(root, n_clients=4, n_clusters=2, samples_per_client=100)
    key = root / "bloom.key"
    key.write_text("the clients' shared secret\n")
    return {**info, "key": key}


def _config(cohort, **sections):
    config = {
        "train": {
            "validation_fraction": 0,
            "progress": False,
            "data": str(cohort["data"]),
            "rounds": 2,
            "seed": 7,
        },
        "model": {"rare_hidden": [8]},
        "fedce": {"bloom_key_file": str(cohort["key"])},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return validate_config(config)


def test_the_genomic_plan_carries_the_configurations_privacy_strategy_and_engine(cohort):
    config = _config(
        cohort,
        train={"strategy": "fedavg_w", "seed": None},
        strategies={"distance": "emd"},
        distance={"emd_metadata": ["prs"]},
        secagg={"enabled": True, "min_clients": 3},
        dp={"enabled": True, "noise_multiplier": 1.2, "batch_size": 16},
    )
    plan = get_task("genomic").plan(config, cohort["data"].parent / "out")
    assert plan.task == "genomic" and plan.engine == "inprocess" and plan.rounds == 2
    assert plan.strategy.name == "fedavg_w"
    assert plan.privacy.secagg == config["secagg"]
    assert plan.privacy.dp["noise_multiplier"] == 1.2
    assert plan.privacy.bloom_key == b"the clients' shared secret"
    # the drawn seed is the plan's and its configuration's (saved in every checkpoint)
    assert isinstance(plan.seed, int) and plan.config["train"]["seed"] == plan.seed
    assert config["train"]["seed"] is None  # the caller's configuration is left as it was
    # a distance-aware strategy's matrix travels in its spec (what a Flower ServerApp rebuilds)
    distance = plan.strategy_spec["distance"]
    assert distance["clients"] == plan.data.client_ids
    assert np.asarray(distance["matrix"]).shape == (4, 4)
    # the DP batch size reaches the clients' optimiser settings
    settings = get_task("genomic").plan_settings(plan)
    assert settings["training"]["batch_size"] == 16 and settings["dp"] == plan.privacy.dp


def test_run_of_a_plan_equals_the_engine_called_directly(cohort, tmp_path):
    config = _config(cohort, train={"strategy": "fedavg"})
    federation = load_federation(cohort["data"])
    plan = get_task("genomic").plan(config, tmp_path / "plan", data=federation)
    client_state: dict = {}
    result = run(plan, client_state=client_state)
    direct = run_inprocess(
        federation,
        FedAvg(),
        rounds=2,
        model_config=federation.model_config(config["model"]),
        training=training_config(config, federation, dp=True),
        random_seed=7,
    )
    for client in federation.client_ids:
        mine = result.strategy.parameters_for(client)
        theirs = direct.strategy.parameters_for(client)
        for name in mine:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
    assert sorted(client_state) == federation.client_ids
    saved = load_checkpoint(latest_checkpoint(tmp_path / "plan"))
    assert saved["config"]["train"]["seed"] == 7 and saved["round"] == 2


def test_train_writes_what_its_plan_trained_with(cohort, tmp_path):
    config = _config(cohort, train={"strategy": "fedce"}, secagg={"enabled": True})
    result = train(config, tmp_path)
    provenance = json.loads((tmp_path / "provenance.json").read_text())
    assert provenance["parameters"]["secagg"]["enabled"] is True
    assert provenance["parameters"]["train"]["seed"] == 7 == result.metrics["seed"]
    assert len(result.history) == 2


def test_bad_plans_are_refused_naming_the_value(cohort):
    federation = load_federation(cohort["data"])
    plain = {"task": "genomic", "data": federation, "strategy": FedAvg(), "seed": 1}
    with pytest.raises(ConfigError, match="'flower-simulation' unknown"):
        RunPlan(**plain, rounds=1, engine="flower-simulation")
    with pytest.raises(ConfigError, match="rounds = 0"):
        RunPlan(**plain, rounds=0)
    config = _config(cohort, secagg={"enabled": True})
    with pytest.raises(ConfigError, match="secure aggregation"):  # SecAgg on, the plan's off
        RunPlan(**plain, rounds=1, config=config, privacy=Privacy())
    with pytest.raises(ConfigError, match="task 'study' builds no run plan"):
        get_task("study").plan(config)
    with pytest.raises(ConfigError, match="unknown"):
        get_task("genomic").plan(
            {**config, "train": {"validation_fraction": 0, **config["train"], "engine": "mpi"}}
        )


def test_a_pooled_strategy_is_refused_on_flower_before_anything_starts(cohort, tmp_path):
    config = _config(cohort, train={"strategy": "centralized"})
    plan = get_task("genomic").plan(config, tmp_path)
    with pytest.raises(ConfigError, match="'centralized' pools every client's data"):
        run(dataclasses.replace(plan, engine="flower-sim"))
    assert not (tmp_path / "flower").exists()


def _same_models(a, b, clients):
    for client in clients:
        mine, theirs = a.strategy.parameters_for(client), b.strategy.parameters_for(client)
        assert mine.keys() == theirs.keys()
        for name in mine:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


def test_a_coordinators_open_transport_runs_the_plan_as_the_engine_does(cohort):
    """``run(plan, transport=..., settings=...)``: the rounds over sites opened by the caller."""
    from rvfedprs.federation.inprocess import InProcessTransport

    config = _config(cohort, train={"strategy": "fedavg"})
    federation = load_federation(cohort["data"])
    task = get_task("genomic")
    plan = task.plan(config, data=federation)
    alone = run(plan)
    rounds = []
    opened = run(
        dataclasses.replace(plan, strategy=FedAvg()),
        transport=InProcessTransport(task, task.plan_sites(plan)),
        settings=task.plan_settings(plan),
        on_round=lambda index, entry: rounds.append((index, entry["round"])),
    )
    _same_models(opened, alone, federation.client_ids)
    assert rounds == [(0, 1), (0, 2)]
    assert [e["loss"] for e in opened.history] == [e["loss"] for e in alone.history]


def test_several_plans_in_one_job_equal_each_run_alone(cohort):
    """One configuration (the job's), two strategies."""
    from rvfedprs.strategies import strategy_from_config

    federation = load_federation(cohort["data"])
    config = _config(cohort, train={"strategy": "fedavg"})

    def plans():
        base = get_task("genomic").plan(config, data=federation)
        other = strategy_from_config("fedprox", config)
        return [
            base,
            dataclasses.replace(base, strategy=other, strategy_spec={"strategy": "fedprox"}),
        ]

    together = run_plans(plans())
    assert [r.strategy.name for r in together] == ["fedavg", "fedprox"]
    for alone, result in zip(map(run, plans()), together, strict=True):
        _same_models(result, alone, federation.client_ids)
    # the two runs trained differently: the comparison has teeth
    a, b = (r.strategy.parameters_for(federation.client_ids[0]) for r in together)
    assert any(not np.array_equal(a[k], b[k]) for k in a)


def test_plans_of_one_job_must_share_the_jobs_fields(cohort):
    config = _config(cohort, train={"strategy": "fedavg"})
    federation = load_federation(cohort["data"])
    plan = get_task("genomic").plan(config, data=federation)
    other = dataclasses.replace(plan, strategy=FedAvg(), rounds=3, seed=8)
    with pytest.raises(ConfigError, match=r"differ in \['rounds', 'seed'\]"):
        run_plans([plan, other])
    with pytest.raises(ConfigError, match="at least one run plan"):
        run_plans([])
