"""A study whose coordinator dies resumes to the result of an uninterrupted one (issue 30.2).

The coordinator is killed at every kind of exchange: its transport raises once the sites have
answered the chosen exchange (the sites did their work, the coordinator never saw it), as a
coordinator killed there would leave things. Between two deaths a site loses the prepared files
a finished stage left with it. Each ``rvfedprs study --resume`` continues from
``study_state.json`` and the runs' checkpoints; the last one's ``study.json``, metrics, tables and
final models equal an uninterrupted study's exactly. A resume under a changed configuration is
refused naming the settings; a fresh run over a saved state says so and starts over.

On Flower's simulation engine (slow: 2–6 min), with ``rvfedprs study`` as its own process: the
coordinator's command is killed mid-run (client01's ClientApp held before round 1's training by
the freeze test hook, :mod:`rvfedprs.federation.freeze`) while the run goes on on the
SuperLink, and ``--attach`` collects it; then the command is killed with its SuperLink and
simulation while round 2 is held, and ``--resume`` continues in a new run (the prepared stages
not run again, round 1 not trained again), to the in-process result (1e-9). The waiting of a
launcher backs off.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _flower_processes import processes_using, wait_frozen  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError, InputDataError  # noqa: E402
from rvfedprs.federation.checkpoints import (  # noqa: E402
    checkpoint_path,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from rvfedprs.federation.flower.processes import backoff  # noqa: E402
from rvfedprs.federation.flower.submit import wait_status  # noqa: E402
from rvfedprs.federation.freeze import FREEZE_DIR_ENV, freeze_file  # noqa: E402
from rvfedprs.federation.task import WARM_START_RUN, Transport  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402
from rvfedprs.study.state import STATE_FILE, StudyState  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ["fedavg", "fedprox"]
MARKER = 123.0
ROUNDS = 2
TABLES = ["variants.tsv", "rare_variants.tsv", "exclusions.tsv", "excluded_samples.tsv",
          "score_match.tsv", "clients.tsv"]  # fmt: skip


class CoordinatorDied(RuntimeError):
    """The coordinator process ended (raised where a kill would have stopped it)."""


class Dying(Transport):
    """The engine's transport of a coordinator killed at the ``at``-th exchange labelled
    ``label``, just after the sites answered it.

    Labels: ``setup``, a step's name (``secagg`` for any secure-sum step), ``fit N`` (round N of
    a training run), ``warm-start fit``.
    """

    def __init__(self, inner: Transport, label: str, at: int = 1, seen: Counter | None = None):
        self.inner, self.label, self.at = inner, label, at
        self.seen = Counter() if seen is None else seen

    @property
    def client_ids(self):
        return self.inner.client_ids

    def subset(self, client_ids):
        return Dying(self.inner.subset(client_ids), self.label, self.at, self.seen)

    def pooled(self, task):
        return self.inner.pooled(task)

    def _exchanged(self, label: str) -> None:
        self.seen[label] += 1
        if label == self.label and self.seen[label] == self.at:
            raise CoordinatorDied(f"coordinator killed after {label} #{self.at}")

    def open(self, payload):
        replies = self.inner.open(payload)
        self._exchanged("setup")
        return replies

    def query(self, requests, settings):
        replies = self.inner.query(requests, settings)
        steps = {r.step.split(".")[0] for r in requests.values()}
        self._exchanged("+".join(sorted(steps)))
        return replies

    def fit(self, server_round, instructions, seeds, settings, client_state):
        replies = self.inner.fit(server_round, instructions, seeds, settings, client_state)
        warm = settings.get("run_index") == WARM_START_RUN
        self._exchanged("warm-start fit" if warm else f"fit {server_round}")
        return replies


def _config(out: Path, *, seed: int | None = 3, **study):
    return load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            "train": {"rounds": ROUNDS, "seed": seed, "compare": STRATEGIES, "progress": False,
                      "validation_fraction": 0},
            "evaluate": {"truth": None, "samples": None},
            "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out), **study},
        },
    )  # fmt: skip


def _study(inputs: Path, out: Path, *, resume=False, dies=None, config=None, seen=None):
    """Run (or resume) the study into ``out``; ``dies``: (label, at) where the coordinator dies;
    ``seen`` counts the exchanges by label."""
    label, at = dies or ("never", 1)
    wrap = None if dies is None and seen is None else (lambda t: Dying(t, label, at, seen))
    return run_study_config(
        config or _config(out),
        scoring_file=inputs / "cohort" / "scores" / "PGS_sim.txt.gz",
        samplesheet=inputs / "sites" / "samplesheet.tsv",
        resume=resume,
        wrap=wrap,
    )


def _final_model(out: Path, strategy: str) -> dict:
    return load_checkpoint(checkpoint_path(out / "train" / strategy, ROUNDS))["strategy_state"]


def _results(value):
    """A summary without its ``traffic`` (what crossed the network in this attempt, and when)."""
    if isinstance(value, dict):
        return {k: _results(v) for k, v in value.items() if k != "traffic"}
    if isinstance(value, list):
        return [_results(v) for v in value]
    return value


def _assert_same_study(out: Path, reference: Path) -> None:
    for name in ["study.json", *[f"train/{s}/metrics.json" for s in STRATEGIES]]:
        resumed, uninterrupted = (json.loads((d / name).read_text()) for d in (out, reference))
        assert _results(resumed) == _results(uninterrupted), name
    for name in TABLES:
        assert (out / name).read_text() == (reference / name).read_text(), name
    for strategy in STRATEGIES:
        resumed, uninterrupted = _final_model(out, strategy), _final_model(reference, strategy)
        assert resumed.keys() == uninterrupted.keys()
        for key, value in uninterrupted.items():
            if isinstance(value, dict):
                for name, array in value.items():
                    np.testing.assert_array_equal(resumed[key][name], array, err_msg=name)
            else:
                np.testing.assert_array_equal(np.asarray(resumed[key]), np.asarray(value), key)


@pytest.fixture(scope="module")
def reference(study_inputs, tmp_path_factory):
    """An uninterrupted study."""
    out = tmp_path_factory.mktemp("uninterrupted")
    summary = _study(study_inputs, out)
    assert sorted(summary["runs"]) == STRATEGIES and summary["left_out"] == {}
    return out


#: Where the coordinator dies, one death per attempt, each attempt resuming the previous one.
DEATHS = [
    ("counts", 1),  # preparation: nothing recorded yet
    ("secagg", 2),  # inside the secure sum of the counts
    ("features", 1),  # the counts recorded
    ("moments", 1),  # the features recorded (then a site loses its prepared files)
    ("fit 2", 1),  # training: round 1 checkpointed
    ("evaluate", 1),  # round 2's evaluation: its checkpoint is saved before it
    ("evaluate", 2),  # the final evaluation (round 2's evaluated first on resume)
    ("moments", 2),  # the second run's start (the first asked again): the first finished
]
#: The attempt after which a site loses its prepared features, another its sample QC as well.
LOSES_FILES = 3


@pytest.mark.slow
def test_a_study_killed_at_every_stage_resumes_to_the_uninterrupted_result(
    study_inputs, reference, tmp_path, caplog
):
    out = tmp_path / "study"
    sites = sorted(read_samplesheet(study_inputs / "sites" / "samplesheet.tsv"))
    for attempt, death in enumerate(DEATHS):
        seen = Counter()
        caplog.clear()
        with caplog.at_level(logging.INFO), pytest.raises(CoordinatorDied, match=death[0]):
            _study(study_inputs, out, resume=attempt > 0, dies=death, seen=seen)
        state = StudyState.read(out)
        assert state is not None and state.seed == 3
        if death == ("features", 1):
            assert list(state.stages) == ["counts"]
        if attempt == LOSES_FILES:
            assert list(state.stages) == ["counts", "features"]
            # a site loses its prepared features, another its sample QC as well
            (out / "sites" / sites[0] / "prepared" / "clients" / sites[0] / "rare_dosages.npz"
             ).unlink()  # fmt: skip
            (out / "sites" / sites[1] / "logs" / "sample_qc.tsv").unlink()
        if death == ("fit 2", 1):
            said = caplog.text
            assert f"site(s) {sites[0]} no longer hold what the features stage" in said
            assert f"site(s) {sites[1]} no longer hold what the counts" in said
        if attempt > LOSES_FILES + 1:  # resumed from the records and the latest checkpoint
            assert seen["counts"] == seen["features"] == seen["secagg"] == 0, seen
        if death == ("evaluate", 1):
            assert seen["fit 1"] == 0 and seen["fit 2"] == 1, seen  # round 1 not trained again
            saved = load_checkpoint(checkpoint_path(out / "train" / "fedavg", 2))["history"]
            assert saved[-1]["evaluation_pending"] and "auc" not in saved[-1]
        if death == ("moments", 2):
            assert "summary" in state.runs["fedavg"] and state.runs["fedprox"] == {"started": True}
    caplog.clear()
    with caplog.at_level(logging.INFO):
        summary = _study(study_inputs, out, resume=True, seen=(seen := Counter()))
    assert seen["fit 1"] == seen["fit 2"] == 1 and seen["counts"] == 0, seen  # the second run
    assert "run fedavg: finished before" in caplog.text
    assert sorted(summary["runs"]) == STRATEGIES
    _assert_same_study(out, reference)
    # the state holds aggregates only: no sample ID of any site
    tables = [pd.read_parquet(p).astype(str) for p in (out / "study_state").iterdir()]
    held = (out / STATE_FILE).read_text() + "\n".join(t.to_csv(sep="\t") for t in tables)
    ids = {
        line.split("\t")[0]
        for s in sites
        for line in (study_inputs / "sites" / s / "samples.tsv").read_text().splitlines()[1:]
    }
    assert len(tables) == 4 and ids and not [i for i in ids if i in held]

    # a changed configuration is refused, naming what changed
    changed = _config(out, min_cell_count=7)
    changed["pipeline"] = {**changed["pipeline"], "rare_maf_max": 0.02}
    with pytest.raises(ConfigError, match=r"changed .*\(pipeline.rare_maf_max, study.min_cell_"):
        _study(study_inputs, out, resume=True, config=changed)
    with pytest.raises(ConfigError, match=r"train.seed \(3 → 4\)"):
        _study(study_inputs, out, resume=True, config=_config(out, seed=4))
    # an unset seed takes the saved one
    again = _study(study_inputs, out, resume=True, config=_config(out, seed=None))
    assert _results(again) == _results(summary)


@pytest.mark.slow
def test_a_fresh_study_over_a_saved_state_says_so_and_starts_over(study_inputs, tmp_path, caplog):
    out = tmp_path / "study"
    with pytest.raises(CoordinatorDied):
        _study(study_inputs, out, dies=("moments", 1))
    assert list(StudyState.read(out).stages) == ["counts", "features"]
    with caplog.at_level(logging.WARNING), pytest.raises(CoordinatorDied):
        _study(study_inputs, out, dies=("counts", 1))
    said = "holds a resumable study state (stages counts, features; runs fedavg (started))"
    assert said in caplog.text
    assert StudyState.read(out).stages == {}  # started over
    assert not (out / "study_state").exists() or not list((out / "study_state").iterdir())
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises(CoordinatorDied):
        _study(study_inputs, tmp_path / "new", resume=True, dies=("setup", 1))
    assert "nothing to resume" in caplog.text


def test_attach_is_refused_on_the_inprocess_engine(tmp_path):
    with pytest.raises(ConfigError, match="--attach waits for a Flower run"):
        run_study_config(_config(tmp_path), scoring_file="unused.txt", attach="3")


def test_a_waiting_launcher_backs_off():
    waits = list(itertools.islice(backoff(), 12))
    assert waits[0] == 0.25 and waits[-1] == 5.0
    assert all(b >= a for a, b in itertools.pairwise(waits))
    assert sum(1 for _ in itertools.takewhile(lambda t: t < 600, itertools.accumulate(backoff()))
               ) < 130  # fmt: skip  # ten minutes of waiting: ~0.2 reads per second (0.25 s: 2400)
    with pytest.raises(ValueError, match="first=0"):
        next(backoff(first=0))


def test_wait_status_reads_the_status_at_the_intervals_given(tmp_path):
    status = tmp_path / "flower" / "status.json"
    status.parent.mkdir()
    used = []

    def waits():
        while True:
            used.append(0.1)
            yield 0.1

    def finish():
        time.sleep(0.6)
        status.write_text(json.dumps({"status": "completed", "round": 2}))

    writer = threading.Thread(target=finish)
    writer.start()
    assert wait_status(status, None, tmp_path, 30, waits=waits())["round"] == 2
    writer.join()
    assert 4 <= len(used) <= 30  # it slept as told, not at a fixed 0.25 s
    started = time.monotonic()
    with pytest.raises(Exception, match="did not finish within 1 s"):
        wait_status(tmp_path / "none.json", None, tmp_path, 1.0)  # a wait never passes the deadline
    assert time.monotonic() - started < 2.0


def _coordinator(
    inputs: Path, out: Path, engine: str, freeze: Path | None = None
) -> subprocess.Popen:
    """``rvfedprs study`` as its own process (the coordinator that gets killed); ``freeze``: the
    folder of the freeze test hook, in its environment and so its ClientApps'."""
    overrides = {
        **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
        "train": {"rounds": ROUNDS, "seed": 3, "compare": ["fedavg"], "progress": False,
                  "validation_fraction": 0},
        "evaluate": {"truth": None, "samples": None},
        "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out),
                  "engine": engine},
    }  # fmt: skip
    out.mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump(overrides))
    argv = [sys.executable, "-m", "rvfedprs", "study", "--config", str(out / "config.yaml"),
            "--samplesheet", str(inputs / "sites" / "samplesheet.tsv"),
            "--scoring-file", str(inputs / "cohort" / "scores" / "PGS_sim.txt.gz")]  # fmt: skip
    env = {**os.environ, **({FREEZE_DIR_ENV: str(freeze)} if freeze else {})}
    with open(out / "coordinator.log", "wb") as sink:
        return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def _frozen_at(
    coordinator: subprocess.Popen, out: Path, freeze: Path, site: str, step: str
) -> None:
    """Until ``site``'s ClientApp is frozen before ``step`` (the run can go no further)."""
    reached = wait_frozen(freeze_file(freeze, site, step), lambda: coordinator.poll() is None, 900)
    assert reached, (
        f"{site} not frozen at {step} within 900 s (coordinator exit status "
        f"{coordinator.poll()}): {(out / 'coordinator.log').read_text()[-3000:]}"
    )


def _wait_for_round(coordinator: subprocess.Popen, out: Path, server_round: int) -> None:
    """Until the Flower run reports training round ``server_round`` done (checkpointed)."""
    status = out / "flower" / "status.json"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        assert coordinator.poll() is None, (out / "coordinator.log").read_text()[-3000:]
        try:
            if json.loads(status.read_text()).get("round", 0) >= server_round:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"no round {server_round} within 900 s")


def _stop_flower(out: Path) -> None:
    """End what the killed coordinator's Flower processes left running (by pid)."""
    home = out / "flower" / "home"
    for _ in range(3):
        for pid in processes_using(home):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)


@pytest.mark.slow
def test_a_killed_flower_coordinator_is_attached_to_then_a_killed_run_resumes(
    study_inputs, reference, tmp_path
):
    """flower-sim: kill the coordinator's command (the run goes on: --attach collects it); kill
    the command and its SuperLink (the run is gone: --resume continues it in a new run)."""
    want = json.loads((reference / "train" / "fedavg" / "metrics.json").read_text())
    # the kills land at known points: client01's ClientApp is frozen before it trains a round
    # (a kill timed from the run's status could land after the run had finished)
    freeze = tmp_path / "freeze"
    freeze.mkdir()
    freeze_file(freeze, "client01", "train.1").touch()
    out = tmp_path / "attached"
    coordinator = _coordinator(study_inputs, out, "flower-sim", freeze)
    try:
        _frozen_at(coordinator, out, freeze, "client01", "train.1")
        run_id = json.loads((out / "flower" / "run.json").read_text())["run_id"]
        coordinator.kill()  # the command only: the SuperLink runs in its own session
        coordinator.wait()
        assert json.loads((out / "flower" / "status.json").read_text())["status"] == "running"
        freeze_file(freeze, "client01", "train.1").unlink()  # the run goes on without its command
        config = _config(out, engine="flower-sim")
        summary = run_study_config(config, scoring_file="unused", attach="")
        assert _results(summary) == _results(json.loads((out / "study.json").read_text()))
        assert run_id in (out / "flower" / "run.json").read_text()
        got = json.loads((out / "train" / "fedavg" / "metrics.json").read_text())
        assert got["auc"] == pytest.approx(want["auc"], abs=1e-9)
    finally:
        coordinator.kill()
        _stop_flower(out)

    out = tmp_path / "resumed"
    # round 1 checkpointed, round 2 never finished
    freeze_file(freeze, "client01", "train.2").touch()
    coordinator = _coordinator(study_inputs, out, "flower-sim", freeze)
    try:
        _frozen_at(coordinator, out, freeze, "client01", "train.2")
        _wait_for_round(coordinator, out, 1)
        coordinator.kill()
        coordinator.wait()
    finally:
        _stop_flower(out)  # the SuperLink and the simulation too: the run is gone
        freeze_file(freeze, "client01", "train.2").unlink()  # the resumed run trains round 2
    state = StudyState.read(out)
    assert list(state.stages) == ["counts", "features"] and state.runs == {
        "fedavg": {"started": True}
    }
    assert not (out / "study.json").exists()
    kept = [out / "study_state" / "counts.variants.parquet"] + [
        out / "sites" / s / f for s in state.stages["features"]["sites"]
        for f in ("logs/counts.request", "prepared/features.request")
    ]  # fmt: skip
    written = {p: p.stat().st_mtime_ns for p in kept}
    # a marker in the saved history: a run that resumes from the checkpoint carries it on
    latest = latest_checkpoint(out / "train" / "fedavg")
    record = load_checkpoint(latest)
    record["history"][0]["loss"] = MARKER
    save_checkpoint(latest, record)
    config = _config(out, engine="flower-sim")
    config["train"] = {**config["train"], "compare": ["fedavg"]}
    try:
        summary = run_study_config(
            config,
            scoring_file=study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz",
            samplesheet=study_inputs / "sites" / "samplesheet.tsv",
            resume=True,
        )
    finally:
        _stop_flower(out)
    assert {p: p.stat().st_mtime_ns for p in kept} == written  # not prepared again
    got = json.loads((out / "train" / "fedavg" / "metrics.json").read_text())
    assert [e["round"] for e in got["history"]] == [1, 2]
    assert got["history"][0]["loss"] == MARKER  # round 1 was not trained again
    assert [e["loss"] for e in got["history"][1:]] == pytest.approx(
        [e["loss"] for e in want["history"][1:]], abs=1e-9
    )
    assert got["client_auc"] == pytest.approx(want["client_auc"], abs=1e-9)
    assert summary["runs"]["fedavg"]["auc"] == pytest.approx(want["auc"], abs=1e-9)
    for name in TABLES:
        assert (out / name).read_text() == (reference / name).read_text(), name


@pytest.mark.slow
def test_a_resume_over_a_sites_changed_inputs_is_refused_naming_them(study_inputs, tmp_path):
    import shutil

    copy = tmp_path / "inputs"
    shutil.copytree(study_inputs / "sites", copy / "sites")
    sheet = copy / "sites" / "samplesheet.tsv"
    sheet.write_text(sheet.read_text().replace(str(study_inputs / "sites"), str(copy / "sites")))
    scores = study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz"
    out = tmp_path / "study"
    config = _config(out)
    config["train"] = {**config["train"], "rounds": 1, "compare": ["fedavg"]}
    run_study_config(config, scoring_file=scores, samplesheet=sheet)
    site = sorted(read_samplesheet(sheet))[1]
    phenotypes = copy / "sites" / site / "phenotypes.tsv"
    table = pd.read_csv(phenotypes, sep="\t", dtype=str)
    column = [c for c in table.columns if set(table[c]) <= {"0", "1"}][0]
    table[column] = table[column].map({"0": "1", "1": "0"})  # the labels swapped
    table.to_csv(phenotypes, sep="\t", index=False)
    with pytest.raises(InputDataError) as said:
        run_study_config(config, scoring_file=scores, samplesheet=sheet, resume=True)
    assert f"the inputs of site(s) {site}: {phenotypes.resolve()} (modified)" in str(said.value)
    assert "without --resume" in str(said.value)
