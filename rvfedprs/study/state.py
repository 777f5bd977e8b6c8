"""What a study's coordinator has finished, kept so that the study resumes after it dies.

``OUT/study_state.json`` records each completed preparation stage with the aggregates the
coordinator already holds, never an individual value: the sites still in the study and those
left out with why, the digest of the request the sites answered (each site keeps the same
digest beside what the stage left with it, so a resume can ask whether it still holds it), the
global tables (``OUT/study_state/*.parquet``, the tables of the TSVs with their exact types) and
the sites' feature summaries; then each training run, once started and once its metrics are
written. With them go the study's seed and a fingerprint of the configuration: a hash of every
setting that shapes the results (:func:`config_fingerprint`), so that a resume under a changed
configuration is refused, naming the settings that changed (:meth:`StudyState.check`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.provenance import file_sha256, jsonable

__all__ = ["STATE_FILE", "StudyState", "config_fingerprint", "digest"]

log = logging.getLogger(__name__)

#: The coordinator's record, in the study's ``out`` folder (its tables in ``study_state/``).
STATE_FILE = "study_state.json"
#: The configuration sections whose settings shape a study's results.
_SECTIONS = (
    "pipeline", "study", "train", "model", "dp", "fedce", "fedglm", "secagg", "strategies",
    "burden", "distance",
)  # fmt: skip
#: Settings of those sections that change no result (where it runs or writes, what it shows);
#: ``train.seed`` is checked on its own (unset, the seed drawn is the one saved).
_IGNORED = {
    "study": {"enabled", "engine", "out", "samplesheet", "sites_dir"},
    "train": {"engine", "progress", "keep_checkpoints", "seed"},
}


def digest(value: Any) -> str:
    """A short SHA-256 of ``value`` as canonical JSON."""
    text = json.dumps(jsonable(value), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_fingerprint(
    config: Mapping[str, Any], *, sites: Any, scoring_file: str | Path, min_replies: int
) -> dict[str, str]:
    """``section.key`` → hash of every setting that shapes a study's results.

    Parameters
    ----------
    config : mapping
        The validated configuration.
    sites : JSON-like
        The sites and their inputs as the coordinator knows them (or only their ids).
    scoring_file : str or Path
        Hashed by its content, as the burden section's region and annotation files.
    min_replies : int
        The fewest sites an exchange needs (``study.min_replies`` or ``flower.min_replies``).
    """
    entries = {}
    for section in _SECTIONS:
        for key, value in (config.get(section) or {}).items():
            if key not in _IGNORED.get(section, ()):
                entries[f"{section}.{key}"] = digest(value)
    entries["sites"] = digest(sites)
    entries["scoring_file"] = file_sha256(scoring_file)[:16]
    for key in ("regions", "annotations"):  # the burden map's files: by content too
        path = (config.get("burden") or {}).get(key)
        if path and Path(path).is_file():
            entries[f"burden.{key}.content"] = file_sha256(path)[:16]
    entries["min_replies"] = digest(int(min_replies))
    return entries


class StudyState:
    """The coordinator's record of a study's finished stages and runs (``OUT/study_state.json``).

    Parameters
    ----------
    out : str or Path
        The study's folder.
    seed : int
    fingerprint : mapping
        :func:`config_fingerprint` of the configuration the study runs with.
    stages : mapping, optional
        Stage → its aggregates (``counts``, ``features``).
    runs : mapping, optional
        Strategy → ``{"started": true}``, then with its ``summary`` once finished.
    """

    def __init__(
        self,
        out: str | Path,
        seed: int,
        fingerprint: Mapping[str, str],
        stages: Mapping[str, Any] | None = None,
        runs: Mapping[str, Any] | None = None,
    ) -> None:
        self.out = Path(out)
        self.seed = int(seed)
        self.fingerprint = dict(fingerprint)
        self.stages: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (stages or {}).items()}
        self.runs: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (runs or {}).items()}

    @property
    def path(self) -> Path:
        """``OUT/study_state.json``."""
        return self.out / STATE_FILE

    @property
    def tables_dir(self) -> Path:
        """``OUT/study_state/``: the stages' tables."""
        return self.out / "study_state"

    @classmethod
    def read(cls, out: str | Path) -> StudyState | None:
        """The state saved in ``out`` (None when there is none).

        Raises
        ------
        ConfigError
            When the file is not a study state (named).
        """
        path = Path(out) / STATE_FILE
        if not path.is_file():
            return None
        try:
            saved = json.loads(path.read_text())
            return cls(out, saved["seed"], saved["fingerprint"], saved["stages"], saved["runs"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path} is not a study state ({exc}); run without --resume") from exc

    def describe(self) -> str:
        """What is done, in words ("stages counts, features; runs fedavg (finished)")."""
        runs = [
            f"{k} ({'finished' if 'summary' in v else 'started'})" for k, v in self.runs.items()
        ]
        return f"stages {', '.join(self.stages) or 'none'}; runs {', '.join(runs) or 'none'}"

    def check(self, fingerprint: Mapping[str, str], seed: int | None) -> None:
        """Refuse to resume under a configuration that changes the saved results.

        Parameters
        ----------
        fingerprint : mapping
            :func:`config_fingerprint` of the configuration given now.
        seed : int or None
            ``train.seed`` given now (None: the saved one is used).

        Raises
        ------
        ConfigError
            Naming every setting that differs from the one the saved state was made with.
        """
        changed = sorted(
            key
            for key in set(self.fingerprint) | set(fingerprint)
            if self.fingerprint.get(key) != fingerprint.get(key)
        )
        if seed is not None and int(seed) != self.seed:
            changed.append(f"train.seed ({self.seed} → {int(seed)})")
        if changed:
            raise ConfigError(
                f"cannot resume the study in {self.out}: the configuration changed since its "
                f"state was saved ({', '.join(changed)}); restore those settings, or run "
                "without --resume to start over"
            )

    def save(self) -> None:
        """Write the state (atomically)."""
        self.out.mkdir(parents=True, exist_ok=True)
        record = {
            "seed": self.seed,
            "fingerprint": self.fingerprint,
            "stages": self.stages,
            "runs": self.runs,
        }
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(jsonable(record), indent=2) + "\n")
        tmp.replace(self.path)

    def restart(self) -> None:
        """Forget every stage and run (a study started over); write the empty state."""
        self.stages, self.runs = {}, {}
        shutil.rmtree(self.tables_dir, ignore_errors=True)
        self.save()

    def record(
        self,
        stage: str,
        aggregates: Mapping[str, Any],
        tables: Mapping[str, pd.DataFrame] | None = None,
    ) -> None:
        """Record ``stage`` as done with its ``aggregates`` (JSON-like) and ``tables``."""
        self.tables_dir.mkdir(parents=True, exist_ok=True)
        for name, table in (tables or {}).items():
            table.to_parquet(self.tables_dir / f"{stage}.{name}.parquet", index=False)
        self.stages[stage] = {**jsonable(dict(aggregates)), "tables": sorted(tables or {})}
        self.save()

    def tables(self, stage: str) -> dict[str, pd.DataFrame]:
        """The tables recorded with ``stage``."""
        names = self.stages[stage].get("tables", [])
        return {n: pd.read_parquet(self.tables_dir / f"{stage}.{n}.parquet") for n in names}

    def forget(self, stage: str) -> None:
        """Mark ``stage`` as not done (it will run again)."""
        self.stages.pop(stage, None)
        self.save()

    def start_run(self, name: str) -> None:
        """Record that the run of strategy ``name`` started (its checkpoints are its own)."""
        self.runs[name] = {"started": True}
        self.save()

    def finish_run(self, name: str, summary: Mapping[str, Any]) -> None:
        """Record the run of ``name`` as finished with its ``summary`` (``study.json``'s entry)."""
        self.runs[name] = {"started": True, "summary": jsonable(dict(summary))}
        self.save()
