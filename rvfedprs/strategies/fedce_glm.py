"""FedCE-GLM: FedCE's clusters with a per-cluster rare GLM fitted exactly on pooled evidence.

A causal rare variant has a handful of carriers per cluster: a per-variant network layer
cannot estimate its effect from them, and a global model moves carriers the same way in every
ancestry group even where the effect's sign differs (issue 29). FedCE-GLM keeps FedCE's
identity — clients send a Bloom filter of their influential rare variants, the server clusters
them by estimated Jaccard similarity — and replaces the two-pathway network by one penalised
logistic model with a **global common part** and a **rare part per cluster**:

    logit_i = β_c · [1, PRS_i, covariates_i] + β_{r,m(k)} · r_i,

r_i being the rare features (region burdens, or dosages), m(k) the cluster of sample i's site.
Its coefficients are fitted exactly by federated Newton iterations: every site returns its
sums of loss, gradient and Hessian at its cluster's coefficients (as
:class:`~rvfedprs.strategies.fedglm.FedGLM`'s sites do), the server sums them **within each
cluster** (one secure sum per cluster under secure aggregation, small clusters merged) and
assembles the joint system: the common block summed over clusters, each cluster's rare block
and its cross terms with the common block from that cluster alone.

Rounds: round 1 is a global step (one cluster); in round ``cluster_round`` (2 by default) the
sites' filters — of the variants whose carriers' residuals weigh most at the current fit — are
clustered, each cluster's rare coefficients start from the global ones, and the joint Newton
iterations run to convergence with the clusters fixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.model import linear_parameters
from rvfedprs.strategies.aggregation import Parameters, copy_parameters, weighted_average
from rvfedprs.strategies.base import FitInstruction, FitResult, _sorted_results
from rvfedprs.strategies.fedce import FedCE
from rvfedprs.strategies.fedglm import PENALIZE, NewtonSearch, glm_dimensions, penalty_vector
from rvfedprs.strategies.secure import SumGroup, normalised_weights
from rvfedprs.training.glm import glm_width

__all__ = ["FedCEGLM"]


class FedCEGLM(FedCE):
    """Bloom/Jaccard clusters; a global common part and per-cluster rare GLM coefficients.

    Parameters
    ----------
    features : {"burden", "dosages"}
        The rare features (``burden`` needs ``burden``).
    l2, penalize
        As :class:`~rvfedprs.strategies.fedglm.FedGLM` (under ``rare``, the common part is
        unpenalised and every cluster's rare coefficients are penalised).
    tol, max_features
        As :class:`~rvfedprs.strategies.fedglm.FedGLM` (``max_features`` bounds the joint
        system: common + clusters × rare).
    burden : BurdenMap, optional
    cluster_round : int
        The round whose filters are clustered (≥ 2: round 1 fits the global model first).
    **fedce
        FedCE's clustering options (``n_clusters``, ``top_k``, ``bloom_capacity``, ...).
    """

    name = "fedce_glm"

    def __init__(
        self,
        *,
        features: str = "dosages",
        l2: float = 1.0,
        penalize: str = "rare",
        tol: float = 1e-10,
        max_features: int = 2000,
        burden: Any = None,
        cluster_round: int = 2,
        **fedce: Any,
    ) -> None:
        fedce.pop("head_aggregation", None)  # no head: the model is linear
        super().__init__(**fedce)
        if features not in ("burden", "dosages"):
            raise ValueError(f"features {features!r} unknown; choose burden or dosages")
        if (features == "burden") != (burden is not None):
            raise ValueError("features 'burden' needs a burden map, and only it takes one")
        if not (np.isfinite(l2) and l2 >= 0):
            raise ValueError(f"l2 must be a finite number >= 0, got {l2}")
        if penalize not in PENALIZE:
            raise ValueError(f"penalize {penalize!r} unknown; choose from {list(PENALIZE)}")
        if int(cluster_round) < 2:
            raise ValueError(f"cluster_round must be >= 2, got {cluster_round}")
        self.features = features
        self.l2, self.tol, self.max_features = float(l2), float(tol), int(max_features)
        self.penalize = penalize
        self.burden = burden
        self._burden_config = None if burden is None else burden.to_config()
        self.cluster_round = int(cluster_round)
        self.template: Parameters = {}
        self.common = np.zeros(0)
        self.rare: dict[int, np.ndarray] = {}
        self.search = NewtonSearch(self.tol)
        self.converged = False

    # --- layout ------------------------------------------------------------------------------
    def _widths(self) -> tuple[int, int]:
        n_covariates, n_rare = glm_dimensions(self.template)
        n_burden = 0 if self.burden is None else self.burden.n_regions
        width = glm_width(self.features, n_covariates, n_rare, n_burden)
        return 2 + n_covariates, width - 2 - n_covariates

    def _reclusters(self, server_round: int) -> bool:
        return server_round == self.cluster_round

    def client_config(self, server_round: int) -> dict[str, Any]:
        """GLM sums on the features; the Bloom filter of influential variants in every round."""
        glm: dict[str, Any] = {"features": self.features, "hessian": True}
        if self._burden_config is not None:
            glm["burden"] = self._burden_config
        return {**super().client_config(server_round), "influence": False, "glm": glm}

    # --- Strategy interface -----------------------------------------------------------------
    def initialize(self, global_parameters, client_ids):
        """One cluster (0); every coefficient 0.

        Raises
        ------
        ConfigError
            When a single cluster's model has more than ``max_features`` coefficients.
        """
        self.template = copy_parameters(global_parameters)
        self.client_ids = sorted(client_ids)
        self.assignment = {c: 0 for c in self.client_ids}
        self.filters = {}
        p_common, p_rare = self._widths()
        if p_common + p_rare > self.max_features:
            raise ConfigError(
                f"a FedCE-GLM on {self.features} has {p_common + p_rare} coefficients per "
                f"cluster, more than max_features {self.max_features}; use features: burden"
            )
        self.common = np.zeros(p_common)
        self.rare = {0: np.zeros(p_rare)}
        self.search = NewtonSearch(self.tol)
        self.converged = False

    @property
    def finished(self) -> bool:
        """Converged once the clusters are fixed."""
        return self.converged

    def _point(self, label: int) -> np.ndarray:
        return np.concatenate([self.common, self.rare[label]])

    def configure_fit(self, server_round, client_ids):
        """Each site gets its cluster's coefficients and zeroed statistics."""
        config = self.client_config(server_round)
        out = {}
        for c in client_ids:
            coef = self._point(self.cluster_of(c))
            out[c] = FitInstruction(
                {
                    "glm.coef": coef,
                    "glm.gradient": np.zeros(coef.size),
                    "glm.hessian": np.zeros((coef.size, coef.size)),
                },
                dict(config),
            )
        return out

    def aggregate_fit(self, server_round, results):
        """Cluster when due; per-cluster sums of the sites' statistics; one joint Newton step."""
        ordered: list[FitResult] = _sorted_results(results)
        new = self._assign(server_round, ordered)
        sums = {}
        for label in sorted(set(new.values())):
            members = [r for r in ordered if new[r.client_id] == label]
            mean = weighted_average([r.parameters for r in members], [r.n_samples for r in members])
            n = float(sum(r.n_samples for r in members))
            sums[label] = _cluster_sums(mean, n)
        self._step(server_round, ordered, new, sums, noise=0.0)

    def secure_groups(self, server_round, results, *, min_clients, small_clusters):
        """One sum per cluster (small clusters merged or refused as FedCE's), ω = n_k / N_m."""
        ordered = _sorted_results(results)
        new = self.secure_assignment(server_round, ordered, min_clients, small_clusters)
        self._pending = {"assignment": dict(new)}
        n = {r.client_id: float(r.n_samples) for r in ordered}
        tensors = ("glm.coef", "glm.gradient", "glm.hessian")
        return {
            f"cluster-{label}": SumGroup(
                tuple(c for c in n if new[c] == label),
                tensors,
                normalised_weights({c: n[c] for c in n if new[c] == label}),
            )
            for label in sorted(set(new.values()))
        }

    def aggregate_sums(self, server_round, results, sums):
        """The joint Newton step from the clusters' secure sums."""
        ordered = _sorted_results(results)
        new = self._pending["assignment"]
        stats, noise = {}, 0.0
        for label in sorted(set(new.values())):
            members = [r for r in ordered if new[r.client_id] == label]
            if not members:
                continue
            group = sums[f"cluster-{label}"]  # the members' updates: their statistics / n_k
            n = float(sum(r.n_samples for r in members))
            stats[label] = _cluster_sums(group.mean(), n)
            noise = max(noise, n * float(group.error_bound) / max(float(group.weight), 1e-300))
        self._pending = {}
        self._step(server_round, ordered, new, stats, noise=noise)

    def _step(self, server_round, ordered, new, sums, *, noise: float) -> None:
        """Assemble the joint system over the clusters and take the (damped) Newton step."""
        if server_round == self.cluster_round:  # new clusters start from the global rare part
            start = self.rare[0] if 0 in self.rare else next(iter(self.rare.values()))
            self.rare = {label: start.copy() for label in sorted(set(new.values()))}
            self.search = NewtonSearch(self.tol)
        self.assignment.update(new)
        labels = sorted(self.rare)
        p_c, p_r = self.common.size, next(iter(self.rare.values())).size
        size = p_c + len(labels) * p_r
        if size > self.max_features:
            raise ConfigError(
                f"FedCE-GLM's joint system has {size} coefficients ({len(labels)} clusters), "
                f"more than max_features {self.max_features}"
            )
        point = np.concatenate([self.common, *[self.rare[m] for m in labels]])
        gradient, hessian = np.zeros(size), np.zeros((size, size))
        for i, label in enumerate(labels):
            if label not in sums:
                continue
            g, h = sums[label]
            r = slice(p_c + i * p_r, p_c + (i + 1) * p_r)
            gradient[:p_c] += g[:p_c]
            gradient[r] += g[p_c:]
            hessian[:p_c, :p_c] += h[:p_c, :p_c]
            hessian[:p_c, r] += h[:p_c, p_c:]
            hessian[r, :p_c] += h[p_c:, :p_c]
            hessian[r, r] += h[p_c:, p_c:]
        loss = sum(float(r.metrics["loss"]) * r.n_samples for r in ordered)
        # the common part [1, PRS, covariates] leads the joint vector, as in a FedGLM's
        penalty = penalty_vector(size, self.l2, self.penalize, p_c - 2)
        self.search.step(point, loss, gradient, hessian, penalty, noise=noise)
        nxt = self.search.next_point
        self.common = nxt[:p_c].copy()
        self.rare = {
            m: nxt[p_c + i * p_r : p_c + (i + 1) * p_r].copy() for i, m in enumerate(labels)
        }
        self.converged = server_round >= self.cluster_round and self.search.converged
        self.client_ids = sorted(set(self.client_ids) | {r.client_id for r in ordered})

    # --- the fitted models -------------------------------------------------------------------
    def parameters_for(self, client_id):
        """The site's cluster model as two-pathway parameters with the same logit.

        Before the first Newton step, the network the run started from (the floor).
        """
        if self.search.iterations == 0:
            return copy_parameters(self.template)
        rare = self.rare[self.cluster_of(client_id)]
        if self.burden is not None:
            rare = self.burden.matrix @ rare
        return linear_parameters(
            self.template, intercept=float(self.common[0]), common_coef=self.common[1:],
            rare_coef=rare,
        )  # fmt: skip

    def ensemble(self) -> dict[str, Any]:
        """The common coefficients and each cluster's rare ones."""
        return {"common": self.common.copy(), "rare": {m: v.copy() for m, v in self.rare.items()}}

    def state_dict(self) -> dict[str, Any]:
        """Coefficients, clusters, filters, the search state and the network template."""
        return {
            "template": copy_parameters(self.template),
            "common": self.common.copy(),
            "rare": {str(m): v.copy() for m, v in self.rare.items()},
            "assignment": dict(self.assignment),
            "filters": {c: np.array(b, copy=True) for c, b in self.filters.items()},
            "client_ids": list(self.client_ids),
            "search": self.search.state_dict(),
            "converged": self.converged,
        }

    def load_state_dict(self, state) -> None:
        """Restore from :meth:`state_dict`."""
        self.template = copy_parameters(state["template"])
        self.common = np.asarray(state["common"], np.float64).copy()
        self.rare = {int(m): np.asarray(v, np.float64).copy() for m, v in state["rare"].items()}
        self.assignment = {c: int(m) for c, m in state["assignment"].items()}
        self.filters = {c: np.asarray(b, dtype=np.uint8) for c, b in state["filters"].items()}
        self.client_ids = list(state["client_ids"])
        self.search = NewtonSearch.from_state_dict(state["search"])
        self.converged = bool(state["converged"])


def _cluster_sums(mean: Mapping[str, np.ndarray], n: float) -> tuple[np.ndarray, np.ndarray]:
    """(Σ gradient, Σ Hessian) of a cluster from its members' n_k-weighted mean statistics."""
    return (
        n * np.asarray(mean["glm.gradient"], np.float64),
        n * np.asarray(mean["glm.hessian"], np.float64),
    )
