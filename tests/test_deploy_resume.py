"""A study on a real deployment whose ServerApp is killed resumes to the uninterrupted result.

On ``flower-deploy`` the study's coordinator program runs in the ServerApp, which the SuperLink
starts (``flwr-serverapp``) for each submitted run. On a loopback deployment — a SuperLink and
two SuperNodes, each given only its own site's configuration — the study runs, and once its
round 1 is checkpointed the ServerApp process is killed with SIGKILL. Flower does not restart
it: the SuperLink marks the run failed once its heartbeats stop, and the waiting ``rvfedprs
study`` says so and that ``--resume`` continues. ``rvfedprs study --resume``, started at once on
the same deployment, first waits for the killed run (the SuperLink still reports it running:
two ServerApps must never write one study), then submits a new run that continues from the
study's state and round 1's checkpoint: the preparation stages are not run again and round 1 is
not trained again. ``study.json``, the run's metrics and final model equal the uninterrupted
study's to 1e-9 and the coordinator's tables exactly — the guarantee between the deployment
and the in-process engine (``tests/test_study.py``), which gives the uninterrupted study here
at a fraction of a deployment's cost (each deployment exchange starts a ClientApp per site).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _flower_processes import alive, processes_using  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402
from test_study_resume import TABLES, _results  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.federation.flower.processes import FlowerRunError  # noqa: E402
from rvfedprs.federation.flower.submit import wait_status  # noqa: E402
from rvfedprs.federation.flower.superlink import start_local  # noqa: E402
from rvfedprs.study.run import run_study_config, write_site_config  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402
from rvfedprs.study.state import StudyState  # noqa: E402

ROUNDS = 2
SITES = 2
STRATEGY = "fedavg"


def _config(out: Path, engine: str = "flower-deploy") -> dict:
    """Two sites, plain counts, no floor fit: the fewest exchanges a study has."""
    return load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            "model": {"start_from_floor": False},
            "train": {"rounds": ROUNDS, "seed": 3, "compare": [STRATEGY], "progress": False,
                      "validation_fraction": 0},
            "evaluate": {"truth": None, "samples": None},
            "study": {"enabled": True, "engine": engine, "out": str(out),
                      "sites_dir": str(out / "sites"), "count_aggregation": "plain"},
        },
    )  # fmt: skip


def _serverapps(home: Path) -> list[int]:
    """Pids of the ServerApp processes the SuperLink of ``home`` started."""
    found = []
    for pid in processes_using(home):
        try:
            if b"flwr-serverapp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _wait_for_round_one(out: Path, launcher: threading.Thread) -> None:
    """Until round 1 of the study's run is checkpointed (and reported)."""
    status = out / "flower" / "status.json"
    checkpoint = checkpoint_path(out / "train" / STRATEGY, 1)
    deadline = time.monotonic() + 1500  # a loaded 2-core host: minutes per exchange
    while time.monotonic() < deadline and launcher.is_alive():
        try:
            if checkpoint.is_file() and json.loads(status.read_text()).get("round", 0) >= 1:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"round 1 was not checkpointed (launcher alive: {launcher.is_alive()})")


@pytest.fixture(scope="module")
def deployment(study_inputs, tmp_path_factory):
    """The uninterrupted study (in-process), then the deployed one: killed, resumed."""
    root = tmp_path_factory.mktemp("deploy-resume")
    table = pd.read_csv(study_inputs / "sites" / "samplesheet.tsv", sep="\t")
    sites = sorted(table["site"].unique())[:SITES]
    sheet = root / "samplesheet.tsv"
    table[table["site"].isin(sites)].to_csv(sheet, sep="\t", index=False)
    inputs = read_samplesheet(sheet)
    nodes = {
        f"supernode-{s}": {
            "site-config": str(write_site_config(inputs[s], root / "sites" / s,
                                                 root / "node" / s / "site.yaml"))
        }
        for s in sites
    }  # fmt: skip
    scores = study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz"
    got: dict = {"sites": sites, "reference": root / "reference", "out": root / "study"}

    def study(out: Path, link, **options):
        return run_study_config(
            _config(out), scoring_file=scores, samplesheet=sheet, superlink=link, **options
        )

    run_study_config(_config(got["reference"], "inprocess"), scoring_file=scores, samplesheet=sheet)

    def killed_launcher(link) -> None:
        try:
            study(got["out"], link)
        except FlowerRunError as exc:
            got["launcher_error"] = str(exc)

    with start_local(root / "link", simulation=False, nodes=nodes) as link:
        home = (root / "link" / "home").resolve()
        launcher = threading.Thread(target=killed_launcher, args=(link,), daemon=True)
        launcher.start()
        _wait_for_round_one(got["out"], launcher)
        got["killed"] = _serverapps(home)
        for pid in got["killed"]:
            os.kill(pid, signal.SIGKILL)
        got["killed_run"] = json.loads((got["out"] / "flower" / "run.json").read_text())["run_id"]
        state = StudyState.read(got["out"])
        got["state_at_kill"] = (list(state.stages), dict(state.runs))
        got["held"] = {
            p: p.stat().st_mtime_ns
            for s in sites
            for p in (root / "sites" / s / "logs" / "counts.request",
                      root / "sites" / s / "prepared" / "features.request")
        }  # fmt: skip
        logger = logging.getLogger("rvfedprs")
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append
        logger.addHandler(handler)
        try:
            got["summary"] = study(got["out"], link, resume=True)
        finally:
            logger.removeHandler(handler)
        got["log"] = "\n".join(r.getMessage() for r in records)
        launcher.join(timeout=120)
        got["launcher_alive"] = launcher.is_alive()
    return got


@pytest.mark.slow
def test_the_killed_serverapp_is_not_restarted_and_the_launcher_says_how_to_go_on(deployment):
    assert len(deployment["killed"]) == 1
    assert not deployment["launcher_alive"]
    said = deployment["launcher_error"]
    assert f"the ServerApp of Flower run {deployment['killed_run']} ended without" in said
    assert "No heartbeat" in said and "--resume" in said
    assert not any(alive(pid) for pid in deployment["killed"])


@pytest.mark.slow
def test_resume_waits_for_the_killed_run_then_continues_in_a_new_run(deployment):
    out, killed = deployment["out"], deployment["killed_run"]
    assert deployment["state_at_kill"] == (["counts", "features"], {STRATEGY: {"started": True}})
    assert f"Flower run {killed} of this job is still running on the SuperLink" in deployment["log"]
    assert f"Flower run {killed} ended without completing" in deployment["log"]
    resumed = json.loads((out / "flower" / "run.json").read_text())["run_id"]
    status = json.loads((out / "flower" / "status.json").read_text())
    assert resumed != killed and status["status"] == "completed" and status["run_id"] == resumed
    # the preparation stages were not run again, round 1 was not trained again
    held = deployment["held"]
    assert {p: p.stat().st_mtime_ns for p in held} == held
    assert "features" not in deployment["summary"]["traffic"]
    run_traffic = json.loads((out / "train" / STRATEGY / "metrics.json").read_text())["traffic"]
    assert run_traffic["fit"]["messages"] == SITES  # one round (2) of two trained here


def _assert_close(got, want, where: str = "") -> None:
    """Equal JSON-like values, floats to 1e-9 (NaN equal to NaN)."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), where
        for key in want:
            _assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_close(a, b, f"{where}[{index}]")
    elif isinstance(want, float) and isinstance(got, float):
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-9), (
            f"{where}: {got} != {want}"
        )
    else:
        assert got == want, where


@pytest.mark.slow
def test_the_resumed_study_equals_the_uninterrupted_one(deployment):
    out, reference = deployment["out"], deployment["reference"]
    for name in ["study.json", f"train/{STRATEGY}/metrics.json"]:
        resumed, uninterrupted = (json.loads((d / name).read_text()) for d in (out, reference))
        _assert_close(_results(resumed), _results(uninterrupted), name)
    for name in TABLES:
        assert (out / name).read_text() == (reference / name).read_text(), name
    final = [
        load_checkpoint(checkpoint_path(d / "train" / STRATEGY, ROUNDS))["strategy_state"]
        for d in (out, reference)
    ]
    assert final[0].keys() == final[1].keys()
    for key, value in final[1].items():
        for name, want in (value if isinstance(value, dict) else {key: value}).items():
            got = final[0][key][name] if isinstance(value, dict) else final[0][key]
            want, got = np.asarray(want), np.asarray(got)
            if np.issubdtype(want.dtype, np.floating):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=name)
            else:
                np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_status_left_by_another_run_of_the_job_is_not_taken_for_its_own(tmp_path):
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"status": "completed", "run_id": "1"}))  # the killed run's
    with pytest.raises(FlowerRunError, match="did not finish within 1 s"):
        wait_status(status, None, tmp_path, 1.0, run_id="2")
    assert wait_status(status, None, tmp_path, 1.0, run_id="1")["status"] == "completed"
    status.write_text(json.dumps({"status": "failed", "error": "x"}))  # no run named: any run's
    assert wait_status(status, None, tmp_path, 1.0, run_id="2")["status"] == "failed"
