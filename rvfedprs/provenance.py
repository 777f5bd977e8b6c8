"""What a run leaves beside its result: ``metrics.json`` and its provenance.

Provenance: version, parameters, seed, input checksums.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import platform
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "draw_seed",
    "file_sha256",
    "jsonable",
    "package_versions",
    "write_metrics",
    "write_provenance",
]

_TRACKED_PACKAGES = (
    "rvfedprs",
    "numpy",
    "scipy",
    "pandas",
    "torch",
    "flwr",
    "opacus",
    "msprime",
    "tskit",
    "scikit-learn",
    "pybloom-live",
    "cyvcf2",
    "pandas-plink",
    "POT",
    "snakemake",
)


def draw_seed(random_seed: int | None) -> int:
    """Return ``random_seed`` or, when it is None, a fresh seed drawn from the OS (to record)."""
    if random_seed is not None:
        return int(random_seed)
    return int(np.random.SeedSequence().generate_state(1)[0] >> 1)


def file_sha256(path: str | Path, *, chunk_bytes: int = 1 << 20) -> str:
    """SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    """Installed versions of the packages results depend on (absent ones are skipped)."""
    versions = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it, recursively.

    Mappings (keys as strings), lists, tuples and sets; numpy scalars as Python numbers;
    paths as strings; NaN and infinities as null.
    """
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_metrics(out: str | Path, metrics: Mapping[str, Any]) -> Path:
    """Write ``out/metrics.json`` (NaN as null).

    The one writer of every run's metrics file: a training run's (through
    :func:`rvfedprs.run.finish_run`), the imaging benchmark's, a tuned study's chosen trial.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    path.write_text(json.dumps(jsonable(metrics), indent=2) + "\n")
    return path


def write_provenance(
    out: str | Path,
    *,
    command: str,
    parameters: Mapping[str, Any],
    seed: int | None,
    inputs: Iterable[str | Path] = (),
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a provenance record.

    Parameters
    ----------
    out : str or Path
        A folder (the record goes to ``out/provenance.json``) or a ``.json`` file path.
    command : str
        What produced the result (e.g. ``"rvfedprs simulate"``).
    parameters : mapping
        The full, validated parameters.
    seed : int or None
        The random seed actually used.
    inputs : iterable of paths
        Input files whose SHA-256 is recorded (folders are skipped).
    extra : mapping, optional
        Anything else worth keeping (measured statistics, timings).

    Returns
    -------
    Path
        The file written.
    """
    out = Path(out)
    target = out if out.suffix == ".json" else out / "provenance.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": command,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "parameters": jsonable(parameters),
        "inputs": {str(p): file_sha256(p) for p in map(Path, inputs) if p.is_file()},
        "versions": package_versions(),
    }
    if extra:
        record["extra"] = jsonable(extra)
    target.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")
    return target
