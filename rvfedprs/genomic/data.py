"""Loading the pipeline's per-client folders and standardising the PRS the federated way.

Input layout (docs/ARCHITECTURE.md, "Per-client inputs")::

    DIR/rare_variants.tsv                  variant_key, ... (column order of the dosages)
    DIR/clients.tsv                        client, n_samples, n_cases, n_train, n_test
    DIR/clients/{client}/samples.parquet   sample_id, prs, phenotype, split
    DIR/clients/{client}/rare_dosages.npz  CSR (n_samples, n_rare_variants)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.exceptions import InputDataError
from rvfedprs.training import ClientData

__all__ = [
    "Federation",
    "load_federation",
    "prs_moments",
    "combine_moments",
    "pool_clients",
]

_SAMPLE_COLUMNS = ("sample_id", "prs", "phenotype", "split")


@dataclass(frozen=True)
class Federation:
    """Every client's train and test data, PRS standardised with federated moments.

    Attributes
    ----------
    data_dir : Path
    variant_keys : list of str, shape (n_rare,)
        Column order of every client's dosage matrix.
    train, test : dict of str to ClientData
        Per-client splits, keyed by client id (sorted).
    prs_mean, prs_sd : float
        The federated mean and standard deviation of the training PRS.
    """

    data_dir: Path
    variant_keys: list[str]
    train: dict[str, ClientData]
    test: dict[str, ClientData]
    prs_mean: float
    prs_sd: float

    @property
    def client_ids(self) -> list[str]:
        """Client ids, sorted."""
        return sorted(self.train)

    @property
    def n_rare(self) -> int:
        """Number of rare-variant columns."""
        return len(self.variant_keys)


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


def _read_client(folder: Path, client: str, n_rare: int) -> tuple[pd.DataFrame, sp.csr_matrix]:
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
    bad_y = sorted(set(pd.unique(samples["phenotype"])) - {0, 1})
    if bad_y:
        raise InputDataError(
            f"client {client!r}: phenotype values {bad_y} in {samples_path}; expected 0/1"
        )
    return samples, dosages


def _client_data(client, samples, dosages, mask, mean, sd) -> ClientData:
    index = np.flatnonzero(mask)
    prs = (samples["prs"].to_numpy(np.float64)[index] - mean) / sd
    return ClientData(
        client_id=client,
        sample_ids=samples["sample_id"].astype(str).to_numpy()[index],
        prs=prs.astype(np.float32),
        rare=dosages[index],
        y=samples["phenotype"].to_numpy(np.float32)[index],
    )


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
    raw: dict[str, tuple[pd.DataFrame, sp.csr_matrix]] = {}
    for client in sorted(chosen):
        folder = data_dir / "clients" / client
        if not folder.is_dir():
            raise InputDataError(
                f"client {client!r} listed in {clients_path} has no folder {folder}"
            )
        raw[client] = _read_client(folder, client, n_rare)
    for client, (samples, _) in raw.items():
        train = samples["split"].astype(str) == "train"
        if not (samples.loc[train, "phenotype"] == 1).any():
            raise InputDataError(f"client {client!r} has no cases in its training split")
    mean, sd = combine_moments(
        prs_moments(s.loc[s["split"].astype(str) == "train", "prs"].to_numpy())
        for s, _ in raw.values()
    )
    train, test = {}, {}
    for client, (samples, dosages) in raw.items():
        is_train = (samples["split"].astype(str) == "train").to_numpy()
        train[client] = _client_data(client, samples, dosages, is_train, mean, sd)
        test[client] = _client_data(client, samples, dosages, ~is_train, mean, sd)
    return Federation(
        data_dir=data_dir,
        variant_keys=variants["variant_key"].tolist(),
        train=train,
        test=test,
        prs_mean=mean,
        prs_sd=sd,
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
    )
