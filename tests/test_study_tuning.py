"""A tuned study (``study.budget``): B configurations per strategy, chosen on validation.

In one process: each trial is a whole run with its grid configuration, its round chosen on the
sites' validation summaries (the floor a candidate); the strategy's result is the trial with the
best validation score, copied to ``train/{strategy}/`` (its ``metrics.json`` names the trial)
and recorded in ``study.json``; a resumed study runs no trial again. On a real deployment (five
SuperNodes over TLS with node authentication, every exchange securely summed) the tuned study
survives a site killed in its last trial as it is asked for its validation summary.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _metrics_writers import WRITER, metrics_writers  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.protocol.grids import configurations  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402

BUDGET = 3
STRATEGY = "fedavg"


def _config(out: Path, **study) -> dict:
    return load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            "train": {"rounds": 2, "seed": 3, "compare": [STRATEGY], "progress": False,
                      "validation_fraction": 0.25},
            "evaluate": {"truth": None, "samples": None},
            "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out),
                      "budget": BUDGET, **study},
        },
    )  # fmt: skip


def _inputs(study_inputs: Path) -> tuple[Path, Path]:
    return (
        study_inputs / "sites" / "samplesheet.tsv",
        study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz",
    )


def _trial_metrics(out: Path, index: int) -> dict:
    return json.loads((out / "tuning" / STRATEGY / f"trial_{index}" / "metrics.json").read_text())


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def tuned(study_inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("tuned") / "study"
    sheet, scores = _inputs(study_inputs)
    lines, logger = _Lines(), logging.getLogger("rvfedprs")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        with metrics_writers() as writers:
            summary = run_study_config(_config(out), scoring_file=scores, samplesheet=sheet)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    return {"out": out, "summary": summary, "sheet": sheet, "scores": scores, "writers": writers,
            "log": "\n".join(lines.lines)}  # fmt: skip


def test_every_metrics_file_of_a_tuned_study_has_the_one_writer(tuned):
    # each trial's metrics.json, then the strategy's (the chosen trial's, with its tuning)
    assert tuned["writers"] == [WRITER] * (BUDGET + 1)


def test_each_trial_runs_its_grid_configuration_and_chooses_its_round_on_validation(tuned):
    out = tuned["out"]
    grid = configurations(STRATEGY, BUDGET)
    for index, configuration in enumerate(grid, start=1):
        metrics = _trial_metrics(out, index)
        provenance = json.loads(
            (out / "tuning" / STRATEGY / f"trial_{index}" / "provenance.json").read_text()
        )
        for key, value in configuration.items():
            section, name = key.split(".")
            assert provenance["parameters"][section][name] == value, (index, key)
        selection = metrics["selection"]
        scores = [selection["floor_validation_auc"], *selection["validation_aucs"]]
        assert selection["validation_auc"] == max(scores)  # the floor among the candidates
        assert selection["selected_round"] == scores.index(max(scores))
    # one floor, fitted by the first trial and served to the others on the same sites
    floors = [_trial_metrics(out, i)["selection"]["floor_validation_auc"] for i in (1, 2, 3)]
    assert floors == [floors[0]] * BUDGET
    assert tuned["log"].count("warm start: as fitted before on the same 4 sites") == BUDGET - 1


def test_the_strategy_is_the_trial_with_the_best_validation_score(tuned):
    out = tuned["out"]
    trials = [_trial_metrics(out, i) for i in range(1, BUDGET + 1)]
    scores = [t["selection"]["validation_auc"] for t in trials]
    best = scores.index(max(scores))  # the first on a tie
    chosen = json.loads((out / "train" / STRATEGY / "metrics.json").read_text())
    assert chosen["tuning"]["chosen_trial"] == best + 1
    assert chosen["tuning"]["validation_scores"] == scores
    assert chosen["tuning"]["configuration"] == configurations(STRATEGY, BUDGET)[best]
    # the chosen trial's own run, test metrics included (read by no choice)
    assert {k: v for k, v in chosen.items() if k != "tuning"} == trials[best]
    table = pd.read_csv(out / "tuning" / STRATEGY / "tuning.tsv", sep="\t")
    assert table["validation_score"].tolist() == pytest.approx(scores, abs=1e-12)
    assert table["chosen"].tolist() == [i == best for i in range(BUDGET)]
    run = json.loads((out / "study.json").read_text())["runs"][STRATEGY]
    assert run["tuning"]["chosen_trial"] == best + 1 and run["auc"] == chosen["auc"]
    assert run == tuned["summary"]["runs"][STRATEGY]


def test_a_resumed_tuned_study_runs_no_trial_again(tuned, caplog):
    out = tuned["out"]
    before = {i: _trial_metrics(out, i) for i in range(1, BUDGET + 1)}
    stamps = {i: (out / "tuning" / STRATEGY / f"trial_{i}" / "metrics.json").stat().st_mtime_ns
              for i in before}  # fmt: skip
    time.sleep(0.01)
    with caplog.at_level("INFO", logger="rvfedprs.study.coordinator"):
        summary = run_study_config(
            _config(out), scoring_file=tuned["scores"], samplesheet=tuned["sheet"], resume=True
        )
    assert summary["runs"] == tuned["summary"]["runs"]
    for i in before:
        path = out / "tuning" / STRATEGY / f"trial_{i}" / "metrics.json"
        assert path.stat().st_mtime_ns == stamps[i]
    assert "run fedavg: finished before" in caplog.text


def test_tuning_without_validation_samples_or_a_grid_is_refused(study_inputs, tmp_path):
    sheet, scores = _inputs(study_inputs)
    config = _config(tmp_path / "none")
    config["train"]["validation_fraction"] = 0.0
    with pytest.raises(ConfigError, match=r"study.budget 3 .* train.validation_fraction > 0"):
        run_study_config(config, scoring_file=scores, samplesheet=sheet)
    config = _config(tmp_path / "ablation")
    config["train"]["compare"] = ["fedce_random"]
    with pytest.raises(ConfigError, match=r"no tuning grid for 'fedce_random'"):
        run_study_config(config, scoring_file=scores, samplesheet=sheet)
    assert not (tmp_path / "none").exists() and not (tmp_path / "ablation").exists()


# --- on a deployment: five SuperNodes over TLS, every exchange securely summed ----------------
#: Two trials on the deployment (the in-process study tries three); the site killed as it is
#: asked for its floor validation summary in the second, which takes the first's floor fit;
#: the fewest sites every exchange needs.
DEPLOY_BUDGET = 2
KILLED_AT = "validate"
KILLED_IN = f"trial {STRATEGY}/trial_{DEPLOY_BUDGET}"
DEPLOY_MIN_REPLIES = 4
DEPLOY_SITES = 5


@pytest.fixture(scope="module")
def five_sites(tmp_path_factory):
    """The small simulated cohort with five sites, split into one folder per site."""
    from _workflows import run_workflow

    root = tmp_path_factory.mktemp("five")
    simulate = {**SMALL_COHORT["simulate"], "n_clients": DEPLOY_SITES}
    config = {**SMALL_COHORT, "simulate": simulate, "study": {"enabled": True}}
    run_workflow(root, config, ["results/sites/samplesheet.tsv",
                                "results/cohort/scores/PGS_sim.txt.gz"])  # fmt: skip
    return root / "results"


@pytest.fixture(scope="module")
def tuned_deployment(five_sites, tmp_path_factory):
    from _flower_processes import alive, in_thread, kill_frozen, make_certificates, site_nodes

    from rvfedprs.federation.flower.superlink import start_local
    from rvfedprs.federation.freeze import FREEZE_DIR_ENV, freeze_file
    from rvfedprs.study.samplesheet import read_samplesheet

    root = tmp_path_factory.mktemp("tuned-deploy")
    sheet, scores = _inputs(five_sites)
    inputs = read_samplesheet(sheet)
    sites = sorted(inputs)
    victim = sites[2]
    out = root / "study"
    config = _config(
        out, engine="flower-deploy", min_replies=DEPLOY_MIN_REPLIES, budget=DEPLOY_BUDGET
    )
    config["train"]["rounds"] = 1
    config["secagg"] = {**config["secagg"], "enabled": True}
    config["flower"] = {**config["flower"], "round_timeout": 120.0, "timeout": 1800}
    nodes = site_nodes(inputs, sites, out / "sites", root / "node")
    certs = root / "certs"
    make_certificates(certs, list(nodes))
    freeze = root / "freeze"
    freeze.mkdir()
    done: dict = {}
    kills: dict = {}
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FREEZE_DIR_ENV, str(freeze))
        with start_local(
            root / "link",
            simulation=False,
            nodes=nodes,
            certificates=certs,
            node_keys={label: certs / "keys" / label for label in nodes},
            clientapp="warm",
        ) as link:
            pids = link.processes.pids()
            runner = in_thread(
                run_study_config, done, config, scoring_file=scores, samplesheet=sheet,
                superlink=link,
            )  # fmt: skip
            log = out / "flower" / "serverapp.log"  # the coordinator's lines, live
            while runner.is_alive() and not (log.is_file() and KILLED_IN in log.read_text()):
                time.sleep(0.1)
            freeze_file(freeze, victim, KILLED_AT).touch()  # before its moments are answered
            kill_frozen(freeze, victim, KILLED_AT, pids, runner, kills)
            runner.join(timeout=1800)
            others = [alive(pids[f"supernode-{s}"]) for s in sites if s != victim]
    if "error" in done:
        raise done["error"]
    assert kills == {victim: True}, f"{victim} never reached its validation exchange"
    assert "result" in done, "the tuned study had not finished 1800 s after it started"
    print(f"tuned study on the deployment: {time.monotonic() - started:.0f} s")
    return {"out": out, "summary": done["result"], "sites": sites, "victim": victim,
            "others_alive": others}  # fmt: skip


@pytest.mark.slow
def test_a_tuned_secure_study_survives_a_site_killed_in_a_validation_exchange(tuned_deployment):
    got = tuned_deployment
    out, victim = got["out"], got["victim"]
    kept = [s for s in got["sites"] if s != victim]
    assert all(got["others_alive"])
    trials = [_trial_metrics(out, i) for i in range(1, DEPLOY_BUDGET + 1)]
    last = trials[-1]
    # the last trial's floor validation and every exchange after: scored on the four left
    assert list(last["history"][0]["validation_failed"]) == [victim]
    assert all(set(e.get("validation_failed", {})) <= {victim} for e in last["history"])
    assert last["evaluated_sites"] == kept
    for trial in trials[:-1]:
        assert trial["evaluated_sites"] == got["sites"]
        assert not any("validation_failed" in e for e in trial["history"])
    for trial in trials:  # every choice from securely summed validation summaries
        validate = trial["traffic"]["validate"]  # each reply a size: the summary is held
        assert validate["bytes_received"] < 200 * validate["messages"]
    # one floor fit for both trials: the first trial's, on the same five sites
    lines = (out / "flower" / "serverapp.log").read_text()
    assert lines.count(f"warm start: as fitted before on the same {len(got['sites'])} sites") == 1
    scores = [t["selection"]["validation_auc"] for t in trials]
    chosen = json.loads((out / "train" / STRATEGY / "metrics.json").read_text())
    assert chosen["tuning"]["chosen_trial"] == scores.index(max(scores)) + 1
    table = pd.read_csv(out / "tuning" / STRATEGY / "tuning.tsv", sep="\t")
    assert table["validated_sites"].tolist() == [",".join(got["sites"]), ",".join(kept)]
    study = json.loads((out / "study.json").read_text())
    assert study["runs"][STRATEGY]["tuning"] == chosen["tuning"]
    status = json.loads((out / "flower" / "status.json").read_text())
    assert status["status"] == "completed"


def test_the_comparison_names_each_strategys_chosen_configuration(tuned):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
    from compare_strategies import tuning_notes

    chosen = json.loads((tuned["out"] / "train" / STRATEGY / "metrics.json").read_text())
    text = tuning_notes([chosen])
    tuning = chosen["tuning"]
    settings = ", ".join(f"{k}={v}" for k, v in tuning["configuration"].items())
    assert f"- {STRATEGY}: trial {tuning['chosen_trial']} of {BUDGET} ({settings})" in text
    assert tuning_notes([{**chosen, "tuning": None}]) == ""
