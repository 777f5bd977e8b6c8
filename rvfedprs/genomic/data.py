"""Loading the pipeline's per-client folders and standardising the PRS the federated way.

Input layout (docs/ARCHITECTURE.md, "Per-client inputs")::

    DIR/rare_variants.tsv                  variant_key, ... (column order of the dosages)
    DIR/clients.tsv                        client, n_samples, n_cases, n_train, n_test
    DIR/clients/{client}/samples.parquet   sample_id, prs, phenotype, split
    DIR/clients/{client}/rare_dosages.npz  CSR (n_samples, n_rare_variants)
    DIR/outcome.json                       {"kind": "binary" | "quantitative", "column": ...}
                                           (absent: binary)

A quantitative phenotype is standardised with its federated training mean and sd, as the PRS
is (:attr:`Federation.trait_mean`, :attr:`Federation.trait_sd`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import BINARY, Outcome, outcome
from rvfedprs.training import ClientData

__all__ = [
    "OUTCOME_FILE",
    "read_outcome",
    "write_outcome",
    "Federation",
    "load_federation",
    "federation_from_tables",
    "prs_moments",
    "combine_moments",
    "covariate_columns",
    "covariate_moments",
    "combine_covariate_moments",
    "pool_clients",
    "standardise_trait",
]

_SAMPLE_COLUMNS = ("sample_id", "prs", "phenotype", "split")

#: The prepared federation's outcome record (its phenotype's kind and column).
OUTCOME_FILE = "outcome.json"


def read_outcome(data_dir: str | Path) -> Outcome:
    """The outcome a prepared federation records in ``outcome.json`` (absent: binary).

    Raises
    ------
    InputDataError
        For an unreadable record or an unknown kind, naming the file.
    """
    import json

    path = Path(data_dir) / OUTCOME_FILE
    if not path.is_file():
        return BINARY
    try:
        return outcome(json.loads(path.read_text())["kind"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputDataError(f"{path}: not an outcome record ({exc})") from None


def write_outcome(data_dir: str | Path, kind: Outcome | str, column: str) -> Path:
    """Write ``outcome.json`` (kind and phenotype column) into a prepared federation."""
    import json

    path = Path(data_dir) / OUTCOME_FILE
    record = {"kind": outcome(kind).kind, "column": str(column)}
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


@dataclass(frozen=True)
class Federation:
    """Every client's train and test data, PRS standardised with federated moments.

    Attributes
    ----------
    data_dir : Path or None
        The pipeline folder it was read from (None: built in memory from arrays).
    variant_keys : list of str, shape (n_rare,)
        Column order of every client's dosage matrix.
    train, test : dict of str to ClientData
        Per-client splits, keyed by client id (sorted).
    prs_mean, prs_sd : float
        The federated mean and standard deviation of the training PRS.
    covariate_names : tuple of str
        The covariates (``samples.parquet`` columns besides the four standard ones), in order.
    covariate_mean, covariate_sd : array of float64, shape (n_covariates,)
        Their federated means and standard deviations over the training splits.
    outcome : Outcome
        The phenotype's kind (``outcome.json``).
    trait_mean, trait_sd : float
        The federated training mean and sd a quantitative phenotype is standardised with
        (0 and 1 for a binary one).
    """

    data_dir: Path | None
    variant_keys: list[str]
    train: dict[str, ClientData]
    test: dict[str, ClientData]
    prs_mean: float
    prs_sd: float
    covariate_names: tuple[str, ...] = ()
    covariate_mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    covariate_sd: np.ndarray = field(default_factory=lambda: np.ones(0))
    outcome: Outcome = BINARY
    trait_mean: float = 0.0
    trait_sd: float = 1.0

    @property
    def client_ids(self) -> list[str]:
        """Client ids, sorted."""
        return sorted(self.train)

    @property
    def n_rare(self) -> int:
        """Number of rare-variant columns."""
        return len(self.variant_keys)

    @property
    def n_covariates(self) -> int:
        """Number of covariates."""
        return len(self.covariate_names)

    def model_config(self, model: Mapping[str, Any]) -> dict[str, Any]:
        """The ``model`` section with the covariate count these data need."""
        return {**dict(model), "n_covariates": self.n_covariates}


def prs_moments(prs: np.ndarray) -> tuple[int, float, float]:
    """One client's contribution to the federated PRS moments: (n, Σx, Σx²)."""
    x = np.asarray(prs, dtype=np.float64)
    return int(x.size), float(x.sum()), float((x * x).sum())


def combine_moments(moments: Iterable[tuple[int, float, float]]) -> tuple[float, float]:
    """Federated mean and (population) standard deviation from per-client (n, Σx, Σx²).

    An sd of 0 (constant PRS) is returned as 1 so that standardising leaves values finite.
    """
    n, s, ss = 0, 0.0, 0.0
    for n_k, s_k, ss_k in moments:
        n, s, ss = n + n_k, s + s_k, ss + ss_k
    if n == 0:
        raise InputDataError("no training samples in any client: cannot standardise the PRS")
    mean = s / n
    var = max(ss / n - mean * mean, 0.0)
    sd = float(np.sqrt(var))
    return float(mean), sd if sd > 0 else 1.0


def covariate_columns(samples: pd.DataFrame) -> tuple[str, ...]:
    """The covariates of a ``samples.parquet`` table: its columns besides the standard four."""
    return tuple(c for c in samples.columns if c not in _SAMPLE_COLUMNS)


def covariate_moments(values: np.ndarray) -> tuple[int, list[float], list[float]]:
    """One client's contribution to the federated covariate moments: (n, Σx, Σx²) per column."""
    x = np.asarray(values, dtype=np.float64)
    return int(x.shape[0]), x.sum(axis=0).tolist(), (x * x).sum(axis=0).tolist()


def combine_covariate_moments(
    moments: Iterable[tuple[int, Sequence[float], Sequence[float]]], n_covariates: int
) -> tuple[np.ndarray, np.ndarray]:
    """Federated means and standard deviations per covariate (an sd of 0 becomes 1)."""
    n, s, ss = 0, np.zeros(n_covariates), np.zeros(n_covariates)
    for n_k, s_k, ss_k in moments:
        n, s, ss = n + n_k, s + np.asarray(s_k, float), ss + np.asarray(ss_k, float)
    if n == 0:
        raise InputDataError("no training samples in any client: cannot standardise covariates")
    mean = s / n
    sd = np.sqrt(np.maximum(ss / n - mean * mean, 0.0))
    return mean, np.where(sd > 0, sd, 1.0)


def standardise_covariates(
    values: np.ndarray, mean: Sequence[float], sd: Sequence[float]
) -> np.ndarray:
    """``(x − mean) / sd`` per column, float32."""
    x = np.asarray(values, dtype=np.float64)
    return ((x - np.asarray(mean, float)) / np.asarray(sd, float)).astype(np.float32)


def _read_client(
    folder: Path, client: str, n_rare: int, kind: Outcome
) -> tuple[pd.DataFrame, sp.csr_matrix]:
    samples_path = folder / "samples.parquet"
    dosage_path = folder / "rare_dosages.npz"
    for path in (samples_path, dosage_path):
        if not path.is_file():
            raise InputDataError(f"client {client!r}: missing {path}")
    samples = pd.read_parquet(samples_path)
    missing = [c for c in _SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise InputDataError(f"client {client!r}: {samples_path} lacks columns {missing}")
    dosages = sp.load_npz(dosage_path).tocsr().astype(np.float32)
    if dosages.shape[1] != n_rare:
        raise InputDataError(
            f"client {client!r}: {dosage_path} has {dosages.shape[1]} rare-variant columns but "
            f"rare_variants.tsv lists {n_rare}"
        )
    if dosages.shape[0] != len(samples):
        raise InputDataError(
            f"client {client!r}: {dosage_path} has {dosages.shape[0]} rows but "
            f"{samples_path} has {len(samples)} samples"
        )
    bad_split = sorted(set(samples["split"].astype(str)) - {"train", "test"})
    if bad_split:
        raise InputDataError(
            f"client {client!r}: split values {bad_split} in {samples_path}; expected train/test"
        )
    for column in covariate_columns(samples):
        values = pd.to_numeric(samples[column], errors="coerce")
        bad = samples.loc[~np.isfinite(values.to_numpy(float)), "sample_id"].astype(str)
        if len(bad):
            raise InputDataError(
                f"client {client!r}: covariate {column!r} in {samples_path} is missing or not a "
                f"finite number for samples {bad.tolist()[:5]}"
            )
    raw = samples["phenotype"]
    numbers = pd.to_numeric(raw, errors="coerce")
    text = raw[numbers.isna() & raw.notna()]
    if len(text):
        raise InputDataError(
            f"client {client!r}: phenotype values {sorted(set(text.astype(str)))[:5]} in "
            f"{samples_path} are not numbers"
        )
    values = numbers.to_numpy(np.float64)
    kind.check(values, where=f"client {client!r}: {samples_path}")
    return samples.assign(phenotype=values), dosages


def _client_data(
    client, samples, dosages, mask, mean, sd, cov_mean, cov_sd, kind, trait
) -> ClientData:
    index = np.flatnonzero(mask)
    prs = (samples["prs"].to_numpy(np.float64)[index] - mean) / sd
    names = list(covariate_columns(samples))
    covariates = None
    if names:
        raw = samples[names].to_numpy(np.float64)[index]
        covariates = standardise_covariates(raw, cov_mean, cov_sd)
    return ClientData(
        client_id=client,
        sample_ids=samples["sample_id"].astype(str).to_numpy()[index],
        prs=prs.astype(np.float32),
        rare=dosages[index],
        y=standardise_trait(samples["phenotype"].to_numpy(np.float64)[index], *trait),
        covariates=covariates,
        outcome=kind,
    )


def standardise_trait(y: np.ndarray, mean: float, sd: float) -> np.ndarray:
    """``(y − mean) / sd`` as float32 (mean 0, sd 1 leave a binary phenotype as it is)."""
    return ((np.asarray(y, dtype=np.float64) - float(mean)) / float(sd)).astype(np.float32)


def load_federation(data_dir: str | Path, *, clients: Iterable[str] | None = None) -> Federation:
    """Load every client of a pipeline output folder.

    Parameters
    ----------
    data_dir : str or Path
        The folder holding ``rare_variants.tsv``, ``clients.tsv`` and ``clients/``.
    clients : iterable of str, optional
        A subset of the clients of ``clients.tsv`` (default: all).

    Returns
    -------
    Federation

    Raises
    ------
    InputDataError
        Missing files or client folders, dosage columns that differ from ``rare_variants.tsv``,
        bad split/phenotype values, or a client without cases in its training split.
    """
    data_dir = Path(data_dir)
    variants_path, clients_path = data_dir / "rare_variants.tsv", data_dir / "clients.tsv"
    for path in (variants_path, clients_path):
        if not path.is_file():
            raise InputDataError(f"missing {path} (is {data_dir} a prepared pipeline output?)")
    variants = pd.read_csv(variants_path, sep="\t", dtype={"variant_key": str})
    if "variant_key" not in variants.columns:
        raise InputDataError(f"{variants_path} lacks the column 'variant_key'")
    listed = pd.read_csv(clients_path, sep="\t", dtype={"client": str})["client"].tolist()
    chosen = listed if clients is None else list(clients)
    unknown = sorted(set(chosen) - set(listed))
    if unknown:
        raise InputDataError(f"clients {unknown} are not listed in {clients_path}")
    if not chosen:
        raise InputDataError(f"no clients listed in {clients_path}")
    n_rare = len(variants)
    kind = read_outcome(data_dir)
    raw: dict[str, tuple[pd.DataFrame, sp.csr_matrix]] = {}
    for client in sorted(chosen):
        folder = data_dir / "clients" / client
        if not folder.is_dir():
            raise InputDataError(
                f"client {client!r} listed in {clients_path} has no folder {folder}"
            )
        raw[client] = _read_client(folder, client, n_rare, kind)
    return federation_from_tables(
        raw, variants["variant_key"].tolist(), kind=kind, data_dir=data_dir
    )


def federation_from_tables(
    tables: Mapping[str, tuple[pd.DataFrame, sp.csr_matrix]],
    variant_keys: Sequence[str],
    *,
    kind: Outcome = BINARY,
    data_dir: Path | None = None,
) -> Federation:
    """A federation from every client's samples table and dosages, standardised federatedly.

    Parameters
    ----------
    tables : mapping of client id to (DataFrame, CSR matrix)
        ``samples.parquet``'s columns (``sample_id, prs, phenotype, split`` and covariates) and
        the rows' rare dosages (columns = ``variant_keys``), as :func:`load_federation` reads
        them or :func:`rvfedprs.arrays.federation_from_arrays` builds them.
    variant_keys : sequence of str
    kind : Outcome
    data_dir : Path, optional
        The folder they were read from (None: built in memory).

    Raises
    ------
    InputDataError
        A client whose training split cannot be learned from, or clients that disagree on
        their covariates.
    """
    raw = {c: tables[c] for c in sorted(tables)}
    for client, (samples, _) in raw.items():  # its values are checked by ClientData
        train = samples["split"].astype(str) == "train"
        kind.check_training(samples.loc[train, "phenotype"].to_numpy(), where=f"client {client!r}")
    names = {c: covariate_columns(samples) for c, (samples, _) in raw.items()}
    if len(set(names.values())) > 1:
        raise InputDataError(f"clients disagree on their covariate columns: {names}")
    covariates = next(iter(names.values()))
    is_train = {
        c: (samples["split"].astype(str) == "train").to_numpy() for c, (samples, _) in raw.items()
    }
    mean, sd = combine_moments(
        prs_moments(samples["prs"].to_numpy()[is_train[c]]) for c, (samples, _) in raw.items()
    )
    cov_mean, cov_sd = combine_covariate_moments(
        (
            covariate_moments(samples[list(covariates)].to_numpy(np.float64)[is_train[c]])
            for c, (samples, _) in raw.items()
        ),
        len(covariates),
    )
    trait = (0.0, 1.0)
    if kind.standardises:
        trait = combine_moments(
            prs_moments(samples["phenotype"].to_numpy()[is_train[c]])
            for c, (samples, _) in raw.items()
        )
    train, test = {}, {}
    for client, (samples, dosages) in raw.items():
        args = (mean, sd, cov_mean, cov_sd, kind, trait)
        train[client] = _client_data(client, samples, dosages, is_train[client], *args)
        test[client] = _client_data(client, samples, dosages, ~is_train[client], *args)
    return Federation(
        data_dir=data_dir,
        variant_keys=list(variant_keys),
        train=train,
        test=test,
        prs_mean=mean,
        prs_sd=sd,
        covariate_names=covariates,
        covariate_mean=cov_mean,
        covariate_sd=cov_sd,
        outcome=kind,
        trait_mean=trait[0],
        trait_sd=trait[1],
    )


def pool_clients(datasets: Mapping[str, ClientData], *, client_id: str = "pooled") -> ClientData:
    """One virtual client holding every client's samples (rows in sorted client order)."""
    parts = [datasets[c] for c in sorted(datasets)]
    return ClientData(
        client_id=client_id,
        sample_ids=np.concatenate([d.sample_ids for d in parts]),
        prs=np.concatenate([d.prs for d in parts]).astype(np.float32),
        rare=sp.vstack([d.rare for d in parts], format="csr").astype(np.float32),
        y=np.concatenate([d.y for d in parts]).astype(np.float32),
        covariates=np.concatenate([d.covariates for d in parts]).astype(np.float32),
        outcome=parts[0].outcome,
    )
