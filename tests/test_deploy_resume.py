"""A study on a real deployment whose ServerApp is killed resumes to the uninterrupted result.

On ``flower-deploy`` the study's coordinator program runs in the ServerApp, which the SuperLink
starts (``flwr-serverapp``) for each submitted run. On a loopback deployment — a SuperLink and
two SuperNodes, each given only its own site's configuration — the ServerApp is killed with
SIGKILL twice, the same SuperLink and SuperNodes serving every run: once the study's first
preparation stage (``counts``) is recorded in its state, then, in the run that resumed it, once
round 1 is checkpointed (each time the first site's ClientApp is held before the next step by
the freeze test hook, :mod:`rvfedprs.federation.freeze`, so the kill lands there and not after
the step or the run). Flower does not restart it: the SuperLink marks the run failed once its
heartbeats stop, and the waiting ``rvfedprs study`` says so and that ``--resume`` continues.
``rvfedprs study --resume``, started at once on the same deployment, first waits for the killed
run (the SuperLink still reports it running: two ServerApps must never write one study), then
submits a new run that continues from the study's state (and round 1's checkpoint): a recorded
stage is not run again (its sites' request markers and the state's tables keep their times) and
round 1 is not trained again. ``study.json``, the run's metrics and final model equal the
uninterrupted study's to 1e-9 and the coordinator's tables exactly — the guarantee between the
deployment and the in-process engine (``tests/test_study.py``), which gives the uninterrupted
study here at a fraction of a deployment's cost (each deployment exchange starts a ClientApp per
site).
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

from _flower_processes import alive, processes_using, site_nodes, wait_frozen  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402
from test_study_resume import TABLES, _results  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.federation.flower.processes import FlowerRunError  # noqa: E402
from rvfedprs.federation.flower.submit import wait_status  # noqa: E402
from rvfedprs.federation.flower.superlink import start_local  # noqa: E402
from rvfedprs.federation.freeze import FREEZE_DIR_ENV, freeze_file  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
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


def _wait_for(what: str, reached, launcher: threading.Thread) -> None:
    """Until ``reached()`` (polled every 0.1 s) while the study's launcher runs."""
    deadline = time.monotonic() + 1500  # a loaded 2-core host: minutes per exchange
    while time.monotonic() < deadline and launcher.is_alive():
        try:
            if reached():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what} was not reached (launcher alive: {launcher.is_alive()})")


def _counts_recorded(out: Path) -> bool:
    """The first preparation stage is recorded in the study's state."""
    state = StudyState.read(out)
    return state is not None and "counts" in state.stages


def _round_one_checkpointed(out: Path) -> bool:
    """Round 1 of the study's run is checkpointed (and reported)."""
    status = out / "flower" / "status.json"
    return (
        checkpoint_path(out / "train" / STRATEGY, 1).is_file()
        and json.loads(status.read_text()).get("round", 0) >= 1
    )


def _stage_files(root: Path, out: Path, sites: list[str], stage: str) -> list[Path]:
    """What ``stage`` leaves: each site's marker of the request it answered, the state's tables."""
    marker = "logs/counts.request" if stage == "counts" else "prepared/features.request"
    tables = sorted((out / "study_state").glob(f"{stage}.*.parquet"))
    return [root / "sites" / s / marker for s in sites] + tables


@pytest.fixture(scope="module")
def deployment(study_inputs, tmp_path_factory):
    """The uninterrupted study (in-process), then the deployed one: killed twice, resumed."""
    root = tmp_path_factory.mktemp("deploy-resume")
    table = pd.read_csv(study_inputs / "sites" / "samplesheet.tsv", sep="\t")
    sites = sorted(table["site"].unique())[:SITES]
    sheet = root / "samplesheet.tsv"
    table[table["site"].isin(sites)].to_csv(sheet, sep="\t", index=False)
    inputs = read_samplesheet(sheet)
    nodes = site_nodes(inputs, sites, root / "sites", root / "node")
    scores = study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz"
    out = root / "study"
    got: dict = {"sites": sites, "reference": root / "reference", "out": out, "kills": {}}

    def study(link, **options):
        return run_study_config(
            _config(out), scoring_file=scores, samplesheet=sheet, superlink=link, **options
        )

    run_study_config(_config(got["reference"], "inprocess"), scoring_file=scores, samplesheet=sheet)

    def launch(link, kill: str, **options) -> threading.Thread:
        """The study (or its resume) in a thread, until its ServerApp is killed at ``kill``."""

        def launcher() -> None:
            try:
                study(link, **options)
            except FlowerRunError as exc:
                got["kills"][kill]["launcher_error"] = str(exc)

        got["kills"][kill] = {}
        thread = threading.Thread(target=launcher, daemon=True)
        thread.start()
        return thread

    def kill_serverapp(kill: str, stages: list[str]) -> None:
        """SIGKILL the ServerApp; what the study holds then."""
        killed = got["kills"][kill]
        killed["pids"] = _serverapps(home)
        for pid in killed["pids"]:
            os.kill(pid, signal.SIGKILL)
        killed["run"] = json.loads((out / "flower" / "run.json").read_text())["run_id"]
        state = StudyState.read(out)
        killed["state"] = (list(state.stages), dict(state.runs))
        killed["held"] = {
            p: p.stat().st_mtime_ns for st in stages for p in _stage_files(root, out, sites, st)
        }

    def frozen(step: str, launcher: threading.Thread) -> Path:
        """Until the first site's ClientApp is frozen before ``step``; the file that holds it."""
        asked = freeze_file(freeze, sites[0], step)
        reached = wait_frozen(asked, launcher.is_alive, timeout=1500)
        assert reached, f"{sites[0]} not frozen at {step} (launcher alive: {launcher.is_alive()})"
        return asked

    # each kill lands at a known point: the first site's ClientApp is frozen before the next
    # step (a kill timed from the study's state alone could land after that step, or the run)
    freeze = root / "freeze"
    freeze.mkdir()
    logger = logging.getLogger("rvfedprs")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FREEZE_DIR_ENV, str(freeze))  # every SuperNode's environment
        with start_local(  # Flower's own 60 s patience: the kills are named sooner
            root / "link",
            simulation=False,
            nodes=nodes,
            clientapp="warm",
            serverapp_patience_seconds=None,
        ) as link:
            got["vital"] = dict(link.processes.vital)
            home = (root / "link" / "home").resolve()
            logger.addHandler(handler)
            try:
                freeze_file(freeze, sites[0], "features").touch()
                first = launch(link, "stage")
                asked = frozen("features", first)
                _wait_for("the counts stage recorded", lambda: _counts_recorded(out), first)
                kill_serverapp("stage", ["counts"])
                asked.unlink()  # its answer goes to a run that is gone
                freeze_file(freeze, sites[0], "train.2").touch()
                second = launch(link, "round", resume=True)
                asked = frozen("train.2", second)
                _wait_for("round 1 checkpointed", lambda: _round_one_checkpointed(out), second)
                kill_serverapp("round", ["counts", "features"])
                asked.unlink()
                got["summary"] = study(link, resume=True)
            finally:
                logger.removeHandler(handler)
            got["log"] = "\n".join(r.getMessage() for r in records)
            for kill, thread in (("stage", first), ("round", second)):
                thread.join(timeout=120)
                got["kills"][kill]["launcher_alive"] = thread.is_alive()
    return got


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["stage", "round"])
def test_a_killed_serverapp_is_not_restarted_and_the_launcher_says_how_to_go_on(deployment, kill):
    killed = deployment["kills"][kill]
    assert len(killed["pids"]) == 1
    assert not killed["launcher_alive"]
    said = killed["launcher_error"]
    assert f"the ServerApp of Flower run {killed['run']} ended without" in said
    assert "No heartbeat" in said and "--resume" in said
    assert not any(alive(pid) for pid in killed["pids"])
    assert deployment["vital"] == {"superlink": "the SuperLink"}  # the wait watches it


@pytest.mark.slow
def test_each_resume_waits_for_the_killed_run_then_continues_where_it_stopped(deployment):
    out, kills = deployment["out"], deployment["kills"]
    assert kills["stage"]["state"] == (["counts"], {})
    assert kills["round"]["state"] == (["counts", "features"], {STRATEGY: {"started": True}})
    runs, said = [kills["stage"]["run"], kills["round"]["run"]], deployment["log"]
    for killed in runs:
        assert f"Flower run {killed} of this job is still running on the SuperLink" in said
        assert f"Flower run {killed} ended without completing" in said
    resumed = json.loads((out / "flower" / "run.json").read_text())["run_id"]
    status = json.loads((out / "flower" / "status.json").read_text())
    assert len({*runs, resumed}) == 3
    assert status["status"] == "completed" and status["run_id"] == resumed
    # a recorded stage was not run again (by either resume), round 1 was not trained again
    for kill in kills.values():
        held = kill["held"]
        assert held and {p: p.stat().st_mtime_ns for p in held} == held
    assert len(kills["stage"]["held"]) == SITES + 4  # the markers, the 4 tables of the counts
    assert not {"counts", "features"} & set(deployment["summary"]["traffic"])
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
