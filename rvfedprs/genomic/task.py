"""The genomic PRS task: a site's per-client folder, the two-pathway model, FedCE and baselines.

A site holds the pipeline's output for itself (``DIR/clients/<id>/samples.parquet``,
``rare_dosages.npz`` and the shared ``DIR/rare_variants.tsv``). What it tells the server at setup
is a summary: (n, Σx, Σx²) of its training PRS (the federated standardisation), its case count
(``pos_weight: auto``) and its number of rare-variant columns (which must agree everywhere). The
server answers with the run settings (optimiser, model shape, the federated PRS mean and sd, DP
settings); every round each site trains with :func:`~rvfedprs.genomic.client.fit_client`.

With DP-SGD on, a site keeps one :class:`~rvfedprs.training.dp.DPState` across rounds, so the ε
it reports is cumulative; the server keeps a copy in its checkpoints (counts and settings only,
nothing about the data) and hands it back to a fresh node on a resumed run.

The model, local training and DP-SGD (torch, opacus) are imported where a round trains or a
model is built: a site answering a query (``setup``: moments and counts) reads its data with
numpy and pandas only, which a fresh ``flwr-clientapp`` process pays for on every message.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.bloom import read_bloom_key
from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.federation.inprocess import POOLED_CLIENT
from rvfedprs.federation.plan import RunPlan
from rvfedprs.federation.seeds import initial_seed
from rvfedprs.federation.task import Task
from rvfedprs.genomic.data import (
    Federation,
    combine_covariate_moments,
    combine_moments,
    covariate_moments,
    load_federation,
    pool_clients,
    prs_moments,
    standardise_covariates,
    standardise_trait,
)
from rvfedprs.outcomes import BINARY, outcome
from rvfedprs.strategies.base import FitInstruction, FitResult, Strategy
from rvfedprs.training.config import LocalTrainingConfig
from rvfedprs.training.data import ClientData

log = logging.getLogger(__name__)

#: The floor's Newton tolerance and round budget (it converges in ~5 rounds).
FLOOR_TOL, FLOOR_ROUNDS = 1e-8, 30

__all__ = [
    "GenomicSite",
    "GenomicTask",
    "local_training_config",
    "training_config",
    "sites_of",
    "client_nodes",
    "initial_parameters",
    "genomic_settings",
    "network_model_config",
    "check_top_k_input",
]


def network_model_config(
    model_config: Mapping[str, Any],
    config: Mapping[str, Any] | None,
    *,
    variants: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The ``model`` section a run's networks are built from, with their rare projection.

    For ``model.rare_input: burden`` (and ``burden+top_k``), ``rare_projection`` holds the
    burden map of the federation's variant set (``variants``, a consortium study's federated
    table; default ``train.data``'s) from the ``burden`` section (:mod:`rvfedprs.burden`)
    and the regions' names (FedCE's Bloom filters hold the influential ones), so every network
    of the run — the server's, the sites', the evaluation's, a checkpoint's — reads the same
    features (:func:`~rvfedprs.model.projection_from_config`). The top-k variants of
    ``top_k`` and ``burden+top_k`` are chosen by the run's warm start, which adds them
    (:meth:`GenomicTask.with_warm_start`). Unchanged otherwise, and when the projection is
    there already.

    Raises
    ------
    ConfigError
        For a burden input without the configuration to build its map from, and for
        ``model.top_k`` that does not fit ``model.rare_input`` (:func:`check_top_k_input`).
    """
    out = dict(model_config)
    rare_input = str(out.get("rare_input", "dosages"))
    check_top_k_input(out)
    if rare_input == "dosages" or out.get("rare_projection") is not None:
        return out
    from rvfedprs.architecture import BURDEN_INPUTS

    out["rare_projection"] = {}  # top_k: the variants come with the warm start
    if rare_input not in BURDEN_INPUTS:
        return out
    if config is None:
        raise ConfigError(
            f"model.rare_input {rare_input!r} needs the run's configuration (train.data and the "
            "burden section) to build its burden map"
        )
    from rvfedprs.strategies import burden_of

    burden = burden_of(config, variants)
    out["rare_projection"] = {"burden": burden.to_config(), "features": list(burden.regions)}
    return out


def check_top_k_input(model_config: Mapping[str, Any]) -> None:
    """Refuse a ``model.top_k`` that does not fit ``model.rare_input`` (each setting named).

    A top-k input needs k >= 1 and the floor (``model.start_from_floor: true``): the variants
    are chosen by score test on the sums of the floor's federated Newton rounds; the other
    inputs take no k.

    Raises
    ------
    ConfigError
    """
    from rvfedprs.architecture import TOP_K_INPUTS

    rare_input = str(model_config.get("rare_input", "dosages"))
    top_k = model_config.get("top_k", 0)
    if rare_input not in TOP_K_INPUTS:
        if top_k:
            raise ConfigError(
                f"model.top_k {top_k} is used only by model.rare_input {list(TOP_K_INPUTS)}, "
                f"not {rare_input!r}; set model.top_k: 0"
            )
        return
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(
            f"model.rare_input {rare_input!r} reads the dosages of model.top_k chosen variants; "
            f"set model.top_k to an integer >= 1, got {top_k!r}"
        )
    if not model_config.get("start_from_floor", True):
        raise ConfigError(
            f"model.rare_input {rare_input!r} needs model.start_from_floor: true, got false: "
            "its top-k variants are chosen by score test during the floor's federated fit, "
            "which model.start_from_floor: false turns off"
        )


def local_training_config(
    train: Mapping[str, Any],
    *,
    n_samples: int,
    n_cases: float,
    dp: Mapping[str, Any] | None = None,
    kind: Any = None,
) -> LocalTrainingConfig:
    """The clients' :class:`LocalTrainingConfig` from the ``train`` (and ``dp``) section.

    Parameters
    ----------
    train : mapping
        The validated ``train`` section (``local_epochs``, ``lr``, ``momentum``,
        ``batch_size``, ``pos_weight``, ``weight_decay``).
    n_samples : int
        Training samples over the whole federation.
    n_cases : float
        Cases among them; ``pos_weight: auto`` becomes ``(n_samples - n_cases) / n_cases``.
    dp : mapping, optional
        The ``dp`` section: when enabled, its ``batch_size`` (if set) replaces the batch size.
    kind : Outcome or str, optional
        The phenotype's outcome (default binary), whose :meth:`~rvfedprs.outcomes.Outcome.
        pos_weight` reads ``pos_weight``.

    Returns
    -------
    LocalTrainingConfig
        ``proximal_mu`` stays 0: a strategy sets it per round in its fit config.

    Raises
    ------
    InputDataError
        When ``pos_weight`` is ``auto`` and the federation has no cases or no controls.
    """
    from rvfedprs.training.config import dp_settings

    pos_weight = outcome(kind).pos_weight(train["pos_weight"], n_samples, {"n_cases": n_cases})
    batch_size = int(train["batch_size"])
    if dp_settings(dp) is not None and dp.get("batch_size") is not None:
        batch_size = int(dp["batch_size"])
    return LocalTrainingConfig(
        epochs=int(train["local_epochs"]),
        lr=float(train["lr"]),
        momentum=float(train["momentum"]),
        batch_size=batch_size,
        pos_weight=None if pos_weight is None else float(pos_weight),
        weight_decay=float(train["weight_decay"]),
    )


def training_config(
    config: Mapping[str, Any],
    federation: Federation,
    *,
    dp: bool = False,
    validation: Mapping[str, Any] | None = None,
) -> LocalTrainingConfig:
    """The clients' :class:`LocalTrainingConfig` for a loaded federation.

    ``pos_weight: auto`` from the training cases the sites train on (less the validation rows
    of ``validation``, the run's split: :meth:`GenomicSite.fit_counts`); with ``dp`` the
    ``dp`` section's batch size applies when DP is enabled (as a DP run trains).
    """
    counts = [site.fit_counts({"validation": validation})
              for site in sites_of(federation).values()]  # fmt: skip
    return local_training_config(
        config["train"],
        n_samples=sum(n for n, _ in counts),
        n_cases=sum(c for _, c in counts),
        dp=config.get("dp") if dp else None,
        kind=federation.outcome,
    )


def job_validation(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The validation split of a job (its configuration's ``train.validation_fraction``).

    :func:`~rvfedprs.evaluation.selection.validation_split` of the fraction and the job's
    seed; None without a configuration or with fraction 0.
    """
    train = (job.get("config") or {}).get("train") or {}
    if not train.get("validation_fraction"):  # no split: nothing of evaluation is needed
        return None
    from rvfedprs.evaluation.selection import validation_split

    return validation_split(train.get("validation_fraction"), job.get("seed"))


def initial_parameters(
    n_rare: int, model_config: Mapping[str, Any], random_seed: int
) -> dict[str, np.ndarray]:
    """w^0 of a run with master seed ``random_seed``: the model seeded by ``initial_seed``."""
    settings = {"n_rare": n_rare, "model": dict(model_config)}
    return GenomicTask().initial_parameters(settings, initial_seed(random_seed))


@dataclass(frozen=True)
class GenomicSite:
    """One site's training data, as its node reads it.

    Attributes
    ----------
    train : ClientData
        The training split. Its PRS is standardised already when ``raw_prs`` is None (a
        :class:`~rvfedprs.genomic.data.Federation` standardised with the federated moments at
        load); otherwise each round standardises ``raw_prs`` with the run's federated mean/sd.
    variant_keys : list of str, shape (n_rare,)
    bloom_key : bytes or None
        The clients' shared HMAC secret for keyed Bloom hashing (never the server's).
    raw_prs : array of float64, shape (n_train,), optional
    raw_covariates : array of float64, shape (n_train, n_covariates), optional
        With ``raw_prs``: the unstandardised covariates (named ``covariate_names``).
    covariate_names : tuple of str
    parts : tuple of GenomicSite
        A pooled site's sites, in the order of its rows (their validation rows are its own).
    raw_y : array of float64, shape (n_train,), optional
        With ``raw_prs``, a quantitative phenotype as the site holds it (each run standardises
        it with the federated mean and sd of ``settings["outcome"]``).
    """

    train: ClientData
    variant_keys: list[str]
    bloom_key: bytes | None = None
    raw_prs: np.ndarray | None = None
    raw_covariates: np.ndarray | None = None
    covariate_names: tuple[str, ...] = ()
    parts: tuple[GenomicSite, ...] = ()
    raw_y: np.ndarray | None = None

    @property
    def client_id(self) -> str:
        """The site's client id."""
        return self.train.client_id

    def standardised(self, settings: Mapping[str, Any]) -> ClientData:
        """Every training sample, the PRS standardised by the run's federated mean and sd."""
        if self.raw_prs is None:
            return self.train
        prs = (self.raw_prs - float(settings["prs_mean"])) / float(settings["prs_sd"])
        covariates = None
        if self.covariate_names:
            covariates = standardise_covariates(
                self.raw_covariates, settings["covariate_mean"], settings["covariate_sd"]
            )
        y = self.train.y
        if self.raw_y is not None:
            trait = settings["outcome"]
            y = standardise_trait(self.raw_y, float(trait["mean"]), float(trait["sd"]))
        return replace(self.train, prs=prs.astype(np.float32), covariates=covariates, y=y)

    def validation_rows(self, settings: Mapping[str, Any]) -> np.ndarray | None:
        """The training rows this site holds out for validation, or None (no ``validation``).

        Drawn from the run's split (``settings["validation"]``,
        :func:`~rvfedprs.evaluation.selection.held_out_rows`); a pooled site's are its parts'.
        """
        spec = settings.get("validation")
        if not spec:
            return None
        if self.parts:
            rows, offset = [], 0
            for part in self.parts:
                rows.append(part.validation_rows(settings) + offset)
                offset += part.train.n_samples
            return np.concatenate(rows)
        from rvfedprs.evaluation.selection import held_out_rows

        return held_out_rows(self.train.y, float(spec["fraction"]), random_seed=int(spec["seed"]),
                             client=self.client_id, kind=self.train.outcome)  # fmt: skip

    def training_data(self, settings: Mapping[str, Any]) -> ClientData:
        """The samples the site trains on: its training split less its validation rows."""
        data = self.standardised(settings)
        held = self.validation_rows(settings)
        if held is None:
            return data
        keep = np.ones(data.n_samples, dtype=bool)
        keep[held] = False
        return data.subset(np.flatnonzero(keep))

    def validation_data(self, settings: Mapping[str, Any]) -> ClientData:
        """The site's validation samples (standardised as its training samples).

        Raises
        ------
        ConfigError
            When the run holds out no validation (``settings`` has no ``validation``).
        """
        held = self.validation_rows(settings)
        if held is None:
            raise ConfigError(
                f"site {self.client_id}: the run holds out no validation samples "
                "(train.validation_fraction is 0)"
            )
        return self.standardised(settings).subset(held)

    def fit_counts(self, settings: Mapping[str, Any]) -> tuple[int, float]:
        """(samples, cases) the site trains on under ``settings``' split (cases 0: quantitative)."""
        held = self.validation_rows(settings)
        y = self.train.y
        if held is not None:
            keep = np.ones(y.size, dtype=bool)
            keep[held] = False
            y = y[keep]
        return int(y.size), float(self.train.outcome.counts(y).get("n_cases", 0.0))

    def trait_moments(self) -> tuple[int, float, float]:
        """(n, Σy, Σy²) of the training phenotype as the site holds it."""
        return prs_moments(self.train.y if self.raw_y is None else self.raw_y)

    def moments(self) -> tuple[int, float, float]:
        """(n, Σx, Σx²) of the training PRS as the site holds it."""
        return prs_moments(self.train.prs if self.raw_prs is None else self.raw_prs)

    def covariate_moments(self) -> tuple[int, list[float], list[float]]:
        """(n, Σx, Σx²) per covariate of the training split as the site holds it."""
        raw = self.train.covariates if self.raw_covariates is None else self.raw_covariates
        return covariate_moments(raw)


def sites_of(federation: Federation, *, bloom_key: bytes | None = None) -> dict[str, GenomicSite]:
    """Every client of a loaded (already standardised) federation as an in-process site."""
    return {
        c: GenomicSite(
            federation.train[c],
            list(federation.variant_keys),
            bloom_key,
            covariate_names=federation.covariate_names,
        )
        for c in federation.client_ids
    }


def client_nodes(
    data_dir: str | Path, clients: Sequence[str], *, bloom_key_file: str | None = None
) -> dict[str, dict[str, str]]:
    """One SuperNode per client: label ``supernode-<client>`` → its node config."""
    nodes = {}
    for client in clients:
        config = {"data-dir": str(Path(data_dir).resolve()), "client-id": client}
        if bloom_key_file:
            config["bloom-key-file"] = str(Path(bloom_key_file).resolve())
        nodes[f"supernode-{client}"] = config
    return nodes


def genomic_settings(
    federation: Federation,
    *,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    dp: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The run settings of a loaded federation (its PRS is standardised already)."""
    settings = {
        "task": GenomicTask.name,
        "training": dataclasses.asdict(training),
        "model": federation.model_config(model_config),
        "prs_mean": federation.prs_mean,
        "prs_sd": federation.prs_sd,
        "covariate_names": list(federation.covariate_names),
        "covariate_mean": federation.covariate_mean.tolist(),
        "covariate_sd": federation.covariate_sd.tolist(),
        "n_rare": federation.n_rare,
        "outcome": {"kind": federation.outcome.kind, "mean": federation.trait_mean,
                    "sd": federation.trait_sd},
    }  # fmt: skip
    if dp is not None:
        settings["dp"] = dict(dp)
    return settings


def trait_settings(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The run's ``outcome``: the sites' common kind and the federated trait mean and sd.

    Raises
    ------
    InputDataError
        When the sites report different outcome kinds (naming each site's).
    """
    kinds = {c: str(r.get("outcome") or BINARY.kind) for c, r in reports.items()}
    if len(set(kinds.values())) > 1:
        raise InputDataError(f"the sites disagree on the phenotype's kind: {kinds}")
    kind = outcome(next(iter(kinds.values())))
    mean, sd = 0.0, 1.0
    if kind.standardises:
        mean, sd = combine_moments(tuple(r["trait-moments"]) for r in reports.values())
    return {"kind": kind.kind, "mean": mean, "sd": sd}


class GenomicTask(Task):
    """RV-FedPRS and its baselines on the pipeline's per-site folders."""

    name = "genomic"
    planner = "rvfedprs.genomic.engine:plan"
    steps = {"setup": "setup_report", "validate": "step_validate"}

    # --- site side -------------------------------------------------------------------------
    def locate(
        self, node_config: Mapping[str, Any], run_config: Mapping[str, Any], settings: Mapping
    ) -> dict[str, str]:
        """Deployment: node config ``data-dir`` and ``client-id`` (and ``bloom-key-file``).

        Simulation: run config ``data-dir`` and the node's ``partition-id`` into the sorted
        clients of ``clients.tsv``; the Bloom key file from the run config.
        """
        node, run = node_config, run_config
        key_file = str(node.get("bloom-key-file", run.get("bloom-key-file", "")))
        if "client-id" in node:
            if "data-dir" not in node:
                raise ConfigError(
                    "node config has client-id but no data-dir; start the SuperNode with "
                    "--node-config \"data-dir='...' client-id='...'\""
                )
            return {
                "data-dir": str(node["data-dir"]),
                "client-id": str(node["client-id"]),
                "bloom-key-file": key_file,
            }
        if "partition-id" not in node or not run.get("data-dir"):
            raise ConfigError(
                f"cannot tell which client this node is: node config {dict(node)} has neither "
                "client-id nor (partition-id with run config data-dir)"
            )
        data_dir = str(run["data-dir"])
        listed = sorted(pd.read_csv(Path(data_dir) / "clients.tsv", sep="\t", dtype=str)["client"])
        index = int(node["partition-id"])
        if not 0 <= index < len(listed):
            raise ConfigError(
                f"partition-id {index} out of range: {len(listed)} clients in {data_dir}"
            )
        return {"data-dir": data_dir, "client-id": listed[index], "bloom-key-file": key_file}

    def open_site(self, locator: Mapping[str, str], settings: Mapping[str, Any]) -> GenomicSite:
        """Read ``data-dir/clients/<client-id>`` (and the shared ``rare_variants.tsv``) only.

        Raises
        ------
        InputDataError
            As :func:`~rvfedprs.genomic.data.load_federation` for this one client.
        ConfigError
            When the Bloom key file is missing or empty.
        """
        data_dir, client = locator["data-dir"], locator["client-id"]
        federation = load_federation(data_dir, clients=[client])
        samples = pd.read_parquet(Path(data_dir) / "clients" / client / "samples.parquet")
        rows = np.flatnonzero((samples["split"].astype(str) == "train").to_numpy())
        names = federation.covariate_names
        return GenomicSite(
            train=federation.train[client],
            variant_keys=list(federation.variant_keys),
            bloom_key=read_bloom_key(locator.get("bloom-key-file"), setting="bloom-key-file"),
            raw_prs=samples["prs"].to_numpy(np.float64)[rows],
            raw_covariates=samples[list(names)].to_numpy(np.float64)[rows] if names else None,
            covariate_names=names,
            raw_y=(samples["phenotype"].to_numpy(np.float64)[rows]
                   if federation.outcome.standardises else None),
        )  # fmt: skip

    def setup_report(self, site: GenomicSite, payload: Mapping[str, Any], state: dict) -> dict:
        """Moments of the training PRS and covariates, the counts it trains on, the width.

        The moments are of every training sample (validation ones included, standardised
        alike); ``n-fit`` and ``n-cases`` of the samples it trains on, less the validation
        rows of the split in ``payload["validation"]`` (:meth:`setup_payload`).
        """
        n, s, ss = site.moments()
        _, cov_s, cov_ss = site.covariate_moments()
        n_fit, n_cases = site.fit_counts({"validation": payload.get("validation")})
        return {
            "n": n,
            "sum": s,
            "sumsq": ss,
            "n-fit": n_fit,
            "n-cases": n_cases,
            "n-rare": len(site.variant_keys),
            "covariates": list(site.covariate_names),
            "covariate-sum": cov_s,
            "covariate-sumsq": cov_ss,
            "outcome": site.train.outcome.kind,
            "trait-moments": list(site.trait_moments()),
        }

    def declared_samples(self, report: Mapping[str, Any]) -> int | None:
        """The samples a setup report says the site trains on (``n-fit``; else ``n``)."""
        value = report.get("n-fit", report.get("n"))
        return None if value is None else int(value)

    def step_validate(self, site: GenomicSite, payload: Mapping[str, Any], state: dict) -> dict:
        """The validation summary of ``payload["parameters"]`` (the site's own model).

        The outcome's :meth:`~rvfedprs.outcomes.Outcome.validation_summary` of the site's
        validation samples (:meth:`GenomicSite.validation_data`) under the network of
        ``payload["settings"]``; with ``payload["secure"]`` the site holds its summary as
        integer vectors for a secure sum (:meth:`~rvfedprs.outcomes.Outcome.dense_validation`)
        and replies with their size only.
        """
        from rvfedprs.model import model_from_config, set_parameters
        from rvfedprs.training.predict import evaluate

        settings = payload["settings"]
        data = site.validation_data(settings)
        model = model_from_config(data.n_rare, settings["model"], initialise=False)
        set_parameters(model, payload["parameters"])
        p = evaluate(model, data)
        if not payload.get("secure"):
            return data.outcome.validation_summary(data.y, p, bins=int(payload["bins"]))
        from rvfedprs.federation.secagg.site import hold
        from rvfedprs.genomic.validation import HELD

        hold(state, HELD, data.outcome.dense_validation(data.y, p, bins=int(payload["bins"])))
        return {"held": int(payload["bins"])}

    def fit(
        self,
        instruction: FitInstruction,
        site: GenomicSite,
        settings: Mapping[str, Any],
        state: dict[str, Any],
        *,
        random_seed: int,
    ) -> FitResult:
        """One round of :func:`~rvfedprs.genomic.client.fit_client` on the site's data."""
        from rvfedprs.genomic.client import ClientContext, fit_client, glm_fit

        if "glm" in instruction.config:  # a federated GLM round: sums, no training (no torch)
            return glm_fit(instruction, site.training_data(settings), site.variant_keys,
                           bloom_key=site.bloom_key, state=state)  # fmt: skip
        from rvfedprs.training.dp import DPState

        dp = settings.get("dp")
        if dp is not None and "dp" not in state:
            state["dp"] = DPState.from_settings(dp)
        context = ClientContext(
            data=site.training_data(settings),
            variant_keys=site.variant_keys,
            model_config=settings["model"],
            training=LocalTrainingConfig(**settings["training"]),
            bloom_key=site.bloom_key,
            state=state,
        )
        return fit_client(instruction, context, random_seed=random_seed)

    def export_state(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        """The DP accountant's state (``{"dp": ...}``), or None without DP."""
        return {"dp": state["dp"].state_dict()} if "dp" in state else None

    def restore_state(self, saved: Mapping[str, Any]) -> dict[str, Any]:
        """Inverse of :meth:`export_state`."""
        from rvfedprs.training.dp import DPState

        return {"dp": DPState.from_state_dict(saved["dp"])} if "dp" in saved else {}

    def check_state(self, saved: Mapping[str, Any] | None, settings: Mapping) -> str | None:
        """Why a reply's exported state is unusable (None when it is fine)."""
        if settings.get("dp") is None:
            return None
        if not saved or "dp" not in saved:
            return "DP is on and no 'dp' state came back"
        from rvfedprs.training.dp import DPState

        try:
            DPState.from_state_dict(saved["dp"])
        except (ValueError, KeyError, TypeError) as exc:
            return f"unreadable 'dp' state ({exc})"
        return None

    def pool_sites(self, sites: Mapping[str, GenomicSite]) -> GenomicSite:
        """One virtual site holding every site's (standardised) training samples."""
        first = sites[sorted(sites)[0]]
        pooled = pool_clients({c: s.train for c, s in sites.items()}, client_id=POOLED_CLIENT)
        return GenomicSite(
            pooled, first.variant_keys, first.bloom_key, covariate_names=first.covariate_names,
            parts=tuple(sites[c] for c in sorted(sites)),
        )  # fmt: skip

    # --- run plans --------------------------------------------------------------------------
    def load_data(self, locator: str | Path) -> Federation:
        """The per-client inputs in folder ``locator``, loaded and standardised."""
        return load_federation(locator)

    def plan_sites(self, plan: RunPlan) -> dict[str, GenomicSite]:
        """Every client of the plan's loaded federation, holding the plan's Bloom key."""
        return sites_of(plan.data, bloom_key=plan.privacy.bloom_key)

    def plan_settings(self, plan: RunPlan) -> dict[str, Any]:
        """The run settings of the plan's loaded federation.

        The plan's training settings, or else its configuration's (DP batch size included).
        """
        training = plan.training
        validation = job_validation({"config": plan.config, "seed": plan.seed})
        if training is None:
            if plan.config is None:
                raise ConfigError("a genomic run plan needs its training settings or a config")
            training = training_config(plan.config, plan.data, dp=True, validation=validation)
        model = plan.model if plan.model is not None else plan.config["model"]
        model = network_model_config(model, plan.config)
        settings = genomic_settings(plan.data, model_config=model, training=training,
                                    dp=plan.privacy.dp)  # fmt: skip
        if validation is not None:
            settings["validation"] = validation
        return settings

    def setup_payload(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """The run's validation split (``validation``), which a site's setup counts exclude."""
        validation = job_validation(job)
        return {} if validation is None else {"validation": validation}

    def selection(
        self,
        transport: Any,
        settings: Mapping[str, Any],
        job: Mapping[str, Any],
        *,
        min_replies: int,
    ) -> Any:
        """The run's choice on the sites' validation summaries, or None without a split."""
        if settings.get("validation") is None:
            return None
        from rvfedprs.federation.plan import enabled_secagg
        from rvfedprs.federation.secagg.protocol import SecAggParams
        from rvfedprs.genomic.validation import SiteValidation

        secagg = enabled_secagg(job.get("config"))
        return SiteValidation(
            transport,
            settings,
            min_replies=min_replies,
            secure=None if secagg is None else SecAggParams.from_config(secagg),
            seed=int(job["seed"]),
        )

    def plan_nodes(self, plan: RunPlan) -> dict[str, Any]:
        """One node per client, each reading its own folder under the federation's."""
        data_dir = str(Path(plan.data.data_dir).resolve())
        key_file = plan.privacy.bloom_key_file
        key_file = str(Path(key_file).resolve()) if key_file else ""
        return {
            "n_sites": len(plan.data.client_ids),
            "nodes": client_nodes(data_dir, plan.data.client_ids, bloom_key_file=key_file),
            "run_config": {"data-dir": data_dir, "bloom-key-file": key_file},
        }

    # --- server side -----------------------------------------------------------------------
    def run_settings(
        self, job: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Optimiser, model shape, federated PRS mean/sd, width and DP settings of the run.

        A burden network's map is of ``job["rare_variants"]`` when the job holds the
        federation's rare-variant table (a consortium study, after its counts stage), else of
        ``train.data``'s (:func:`network_model_config`).

        Raises
        ------
        InputDataError
            When the sites disagree on the number of rare-variant columns, or ``pos_weight:
            auto`` meets a federation without cases or controls.
        """
        from rvfedprs.training.config import dp_settings

        config = job["config"]
        widths = {c: int(r["n-rare"]) for c, r in reports.items()}
        if len(set(widths.values())) > 1:
            raise InputDataError(
                f"the sites disagree on the number of rare-variant columns: {widths} (were they "
                "prepared with the same rare_variants.tsv?)"
            )
        mean, sd = combine_moments(
            (int(r["n"]), float(r["sum"]), float(r["sumsq"])) for r in reports.values()
        )
        names = {c: tuple(r.get("covariates") or ()) for c, r in reports.items()}
        if len(set(names.values())) > 1:
            raise InputDataError(f"the sites disagree on their covariates: {names}")
        covariates = next(iter(names.values()))
        cov_mean, cov_sd = combine_covariate_moments(
            (
                (int(r["n"]), r.get("covariate-sum") or [], r.get("covariate-sumsq") or [])
                for r in reports.values()
            ),
            len(covariates),
        )
        trait = trait_settings(reports)
        training = local_training_config(
            config["train"],
            n_samples=sum(int(self.declared_samples(r)) for r in reports.values()),
            n_cases=sum(float(r["n-cases"]) for r in reports.values()),
            dp=config.get("dp"),
            kind=trait["kind"],
        )
        settings: dict[str, Any] = {
            "training": dataclasses.asdict(training),
            "model": network_model_config(
                {**dict(config["model"]), "n_covariates": len(covariates)},
                config,
                variants=job.get("rare_variants"),
            ),
            "prs_mean": mean,
            "prs_sd": sd,
            "covariate_names": list(covariates),
            "covariate_mean": cov_mean.tolist(),
            "covariate_sd": cov_sd.tolist(),
            "n_rare": next(iter(widths.values())),
            "outcome": trait,
        }
        dp = dp_settings(config.get("dp"))
        if dp is not None:
            settings["dp"] = dp
        validation = job_validation(job)
        if validation is not None:
            settings["validation"] = validation
        return settings

    def initial_parameters(self, settings: Mapping[str, Any], random_seed: int) -> dict:
        """A freshly initialised two-pathway model of the run's width, started at the floor.

        With the floor fitted (``settings["floor"]``, :meth:`with_warm_start`) the model's
        logit is exactly the floor's (:func:`~rvfedprs.model.linear_parameters`); the rest of
        the network keeps its random initialisation behind zero head weights. Before a top-k
        input's variants are chosen (the warm start that chooses them starts from this), the
        network reads the dosages: the floor's fit needs the width P of the dosages it screens.
        """
        from rvfedprs.model import (
            get_parameters,
            linear_parameters,
            model_from_config,
            top_k_pending,
        )

        model_config = settings["model"]
        if top_k_pending(model_config):
            if settings.get("floor") is not None:
                raise ConfigError(
                    f"the run settings hold a floor but model.rare_input "
                    f"{model_config['rare_input']!r} has no chosen variants"
                )
            model_config = {**dict(model_config), "rare_input": "dosages"}
        model = model_from_config(int(settings["n_rare"]), model_config, random_seed=random_seed)
        parameters = get_parameters(model)
        floor = settings.get("floor")
        if floor is None:
            return parameters
        coef = np.asarray(floor["coef"], dtype=np.float64)
        return linear_parameters(
            parameters, intercept=float(coef[0]), common_coef=coef[1:], trainable=True
        )

    def parameter_template(self, settings: Mapping[str, Any]) -> dict:
        """Zeros of the network's parameters (:func:`~rvfedprs.architecture.parameter_shapes`).

        The shapes :meth:`initial_parameters` would give, without building the network (nor
        importing torch), for a strategy that serves only a linear model of them (FedAssoc).
        """
        from rvfedprs.architecture import parameter_shapes, top_k_pending

        model_config = settings["model"]
        if top_k_pending(model_config):
            model_config = {**dict(model_config), "rare_input": "dosages"}
        shapes = parameter_shapes(int(settings["n_rare"]), model_config)
        return {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}

    def warm_start(self, settings: Mapping[str, Any], job: Mapping[str, Any]):
        """The floor (SPEC §4): an unpenalised federated GLM on PRS + covariates.

        For a top-k input (``model.rare_input: top_k`` or ``burden+top_k``) whose variants
        are not chosen yet, the floor's rounds also carry the sites' score sums and choose the
        ``model.top_k`` variants (:class:`~rvfedprs.strategies.top_variants.FloorScreen`), as a
        GLM on top-k features does. None when ``model.start_from_floor`` is false.

        Raises
        ------
        ConfigError
            When ``model.top_k`` is more than the federation's rare variants.
        """
        model = dict(settings["model"])
        if not model.get("start_from_floor", True):
            return None
        from rvfedprs.model import top_k_pending
        from rvfedprs.strategies.fedglm import FedGLM

        top_k = int(model.get("top_k", 0)) if top_k_pending(model) else 0
        if top_k > int(settings["n_rare"]):
            raise ConfigError(
                f"model.top_k {top_k} is more than the federation's {settings['n_rare']} rare "
                "variants"
            )
        return FedGLM(features="floor", l2=0.0, tol=FLOOR_TOL, top_k=top_k), FLOOR_ROUNDS

    def with_warm_start(self, settings, strategy, history) -> dict[str, Any]:
        """``settings["floor"]``: the floor's coefficients, rounds and convergence.

        A screening floor's chosen variants (largest score statistic first) go to
        ``settings["floor"]["top_k"]`` and to the network's ``rare_projection["top_k"]``, so
        the server, the sites, the evaluation and the checkpoints build the same network.
        With DP-SGD on, the floor's sums (over PRS and covariates, and the score sums of the
        top-k choice) are released outside ε, as the Bloom filters are; the record says so.

        Raises
        ------
        InputDataError
            When the screening floor did not converge: no variants were chosen.
        """
        floor = {
            "coef": strategy.coef.tolist(),
            "rounds": len(history),
            "converged": bool(strategy.converged),
        }
        if settings.get("dp") is not None:
            floor["outside_dp"] = True
        if not strategy.converged:
            log.warning("the floor's federated fit did not converge in %d rounds", len(history))
        out = {**dict(settings), "floor": floor}
        if strategy.top_k:
            model = dict(settings["model"])
            if strategy.top is None:
                raise InputDataError(
                    f"the floor's federated fit did not converge in {len(history)} rounds, so "
                    f"model.rare_input {model['rare_input']!r} has no top-k variants (is the "
                    "outcome separable by the PRS and covariates?)"
                )
            floor["top_k"] = strategy.top.tolist()
            projection = {**(model.get("rare_projection") or {}), "top_k": floor["top_k"]}
            out["model"] = {**model, "rare_projection": projection}
        return out

    def build_strategy(self, spec: Mapping[str, Any], job: Mapping[str, Any]) -> Strategy:
        """Strategy ``spec["strategy"]`` with its options from the job's configuration.

        ``spec["distance"]`` (``matrix``, ``clients``) gives ``fedavg_w`` / ``cluster_fedavg``
        a client distance matrix computed before the run; ``job["rare_variants"]`` (a study's
        federated rare-variant table) is the variant set of the GLMs' burden features.
        """
        from rvfedprs.strategies import strategy_from_config

        distance = spec.get("distance")
        extra = {}
        if distance:
            extra = {
                "distance": np.asarray(distance["matrix"], dtype=np.float64),
                "distance_clients": list(distance["clients"]),
            }
        return strategy_from_config(
            spec["strategy"], job["config"], variants=job.get("rare_variants"), **extra
        )

    def checkpoint_extra(self, settings: Mapping[str, Any], job: Mapping[str, Any]) -> dict:
        """The model's width and shape and the configuration (``rvfedprs evaluate`` reads them)."""
        extra = {"n_rare": int(settings["n_rare"]), "model_config": dict(settings["model"])}
        if settings.get("floor") is not None:
            extra["floor"] = dict(settings["floor"])
        if job.get("config") is not None:
            extra["config"] = job["config"]
        return extra

    def summary(self, results: Sequence[Any]) -> dict[str, Any]:
        """``epsilon_clients`` of a DP run (every client's cumulative ε), else nothing."""
        out: dict[str, Any] = {}
        for result in results:
            eps = {
                c: s["dp"].epsilon() for c, s in sorted(result.client_state.items()) if "dp" in s
            }
            if eps:
                out["epsilon_clients"] = eps
        return out
