"""FedCE-GLM: FedCE's clusters with a per-cluster rare GLM fitted exactly on pooled evidence.

A causal rare variant has a handful of carriers per cluster: a per-variant network layer
cannot estimate its effect from them, and a global model moves carriers the same way in every
ancestry group even where the effect's sign differs (issue 29). FedCE-GLM keeps FedCE's
identity — clients send a Bloom filter of their influential rare variants, the server clusters
them by estimated Jaccard similarity — and replaces the two-pathway network by one penalised
logistic model with a **global common part** and a **rare part per cluster**:

    logit_i = β_c · [1, PRS_i, covariates_i] + β_{r,m(k)} · r_i,

r_i being the rare features (dosages, region burdens, top-k dosages, or burdens and top-k
dosages), m(k) the cluster of sample i's site.
Its coefficients are fitted exactly by federated Newton iterations: every site returns its
sums of loss, gradient and Hessian at its cluster's coefficients (as
:class:`~rvfedprs.strategies.fedglm.FedGLM`'s sites do), the server sums them **within each
cluster** (one secure sum per cluster under secure aggregation, small clusters merged) and
assembles the joint system: the common block summed over clusters, each cluster's rare block
and its cross terms with the common block from that cluster alone.

**Candidates are converged fits** (:mod:`rvfedprs.strategies.penalty_path`): the common part
starts from the floor the run started from, ``l2`` may be a path of λ (largest first, each from
the previous fit), and every round serves the last converged per-cluster fit — before the
first, the floor; never the global step of round 1 nor a half-way iterate.

Rounds: round 1 is a global step (one cluster); in round ``cluster_round`` (2 by default) the
sites' filters — of the variants whose carriers' residuals weigh most at the current fit — are
clustered, each cluster's rare coefficients start from the global ones, and the joint Newton
iterations run to convergence with the clusters fixed.

**Top-k features** (``top_k``, ``burden+top_k``): the floor's Newton rounds come first, one
global sum each, carrying the sites' score sums; the top k are chosen there, once, on every
site's training data together (:class:`~rvfedprs.strategies.top_variants.FloorScreen`), and
rounds 1, ``cluster_round``, ... above count from the end of those rounds (the global step
starts from the floor). The choice is global, not per cluster, by decision: (a) the clusters do
not exist yet when the floor is fitted, and a per-cluster choice would need a score round after
clustering; (b) a causal variant has a handful of carriers per cluster, so a per-cluster
ranking on them is mostly noise, while the pooled ranking has every carrier; (c) one column
list keeps every cluster's rare coefficients on the same features, so the joint system keeps
its layout. What it costs: a shared variant with opposite effects in two clusters has pooled
scores that cancel and may be missed — the coefficients of the variants chosen are still fitted
per cluster, and a region burden (``burden+top_k``) still carries such a gene per cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.model import linear_floor, linear_parameters
from rvfedprs.strategies.aggregation import Parameters, copy_parameters, weighted_average
from rvfedprs.strategies.base import FitInstruction, FitResult, _sorted_results
from rvfedprs.strategies.burden_delivery import BurdenDelivery
from rvfedprs.strategies.fedce import FedCE
from rvfedprs.strategies.fedglm import (
    PENALIZE,
    NewtonSearch,
    check_glm_features,
    check_top_k,
    glm_dimensions,
    penalty_vector,
    rare_dosage_coef,
)
from rvfedprs.strategies.penalty_path import PenaltyPath
from rvfedprs.strategies.secure import SumGroup, normalised_weights
from rvfedprs.strategies.top_variants import FloorScreen, ScreenedGLM
from rvfedprs.training.glm import TOP_K_FEATURES, glm_width

__all__ = ["FedCEGLM"]


class FedCEGLM(ScreenedGLM, FedCE):
    """Bloom/Jaccard clusters; a global common part and per-cluster rare GLM coefficients.

    Parameters
    ----------
    features : {"dosages", "burden", "top_k", "burden+top_k"}
        The rare features (the burden ones need ``burden``, the top-k ones ``glm_top_k``), as
        :class:`~rvfedprs.strategies.fedglm.FedGLM`'s.
    l2, penalize
        As :class:`~rvfedprs.strategies.fedglm.FedGLM` (under ``rare``, the common part is
        unpenalised and every cluster's rare coefficients are penalised).
    tol, max_features
        As :class:`~rvfedprs.strategies.fedglm.FedGLM` (``max_features`` bounds the joint
        system: common + clusters × rare).
    burden : BurdenMap, optional
        Sent to each site once per run (:mod:`rvfedprs.strategies.burden_delivery`).
    glm_top_k : int
        k of the top-k features (``fedglm.top_k``; ``fedce.top_k`` is the Bloom filter's), chosen
        globally before clustering.
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
        l2: float | list[float] = 1.0,
        penalize: str = "rare",
        tol: float = 1e-10,
        max_features: int = 2000,
        burden: Any = None,
        glm_top_k: int = 0,
        cluster_round: int = 2,
        **fedce: Any,
    ) -> None:
        fedce.pop("head_aggregation", None)  # no head: the model is linear
        super().__init__(**fedce)
        if features == "floor":
            raise ValueError("features 'floor' has no rare part to fit per cluster")
        check_glm_features(features, burden, glm_top_k)
        self.path = PenaltyPath(l2)  # refuses a negative, infinite or empty l2
        if penalize not in PENALIZE:
            raise ValueError(f"penalize {penalize!r} unknown; choose from {list(PENALIZE)}")
        if int(cluster_round) < 2:
            raise ValueError(f"cluster_round must be >= 2, got {cluster_round}")
        self.features = features
        self.tol, self.max_features = float(tol), int(max_features)
        self.penalize = penalize
        self.burden = burden
        self._delivery = None if burden is None else BurdenDelivery(burden)
        self.glm_top_k = int(glm_top_k)
        self.cluster_round = int(cluster_round)
        self.template: Parameters = {}
        self.common = np.zeros(0)
        self.rare: dict[int, np.ndarray] = {}
        self.search = NewtonSearch(self.tol)
        self.screen: FloorScreen | None = None
        self.offset = 0  # the floor's rounds before the top-k choice
        self.converged = False

    @property
    def l2(self) -> float:
        """The λ being fitted (the path's current one)."""
        return self.path.l2

    # --- layout ------------------------------------------------------------------------------
    def _widths(self) -> tuple[int, int]:
        n_covariates, n_rare = glm_dimensions(self.template)
        n_burden = 0 if self.burden is None else self.burden.n_regions
        width = glm_width(self.features, n_covariates, n_rare, n_burden, self.glm_top_k)
        return 2 + n_covariates, width - 2 - n_covariates

    def _reclusters(self, server_round: int) -> bool:
        return not self.screening and server_round - self.offset == self.cluster_round

    def client_config(self, server_round: int) -> dict[str, Any]:
        """GLM sums on the features; the Bloom filter of influential variants in every round.

        In the floor's rounds of top-k features: the floor's and score sums, no filter.
        """
        if self.screening:
            return {"glm": FloorScreen.config()}
        glm: dict[str, Any] = {"features": self.features, "hessian": True}
        if self.top is not None:
            glm["top_k"] = self.top.tolist()
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
        n_covariates, n_rare = glm_dimensions(self.template)
        check_top_k(self.glm_top_k, n_rare)
        p_common, p_rare = self._widths()
        if p_common + p_rare > self.max_features:
            raise ConfigError(
                f"a FedCE-GLM on {self.features} has {p_common + p_rare} coefficients per "
                f"cluster, more than max_features {self.max_features}; use features: burden"
            )
        floor = linear_floor(self.template)
        self.common = np.zeros(p_common) if floor is None else floor
        self.rare = {0: np.zeros(p_rare)}
        self.search = NewtonSearch(self.tol)
        self.path.restart()
        self.converged = False
        self.offset = 0
        self.screen = None
        if self.features in TOP_K_FEATURES:
            self.screen = FloorScreen(
                self.glm_top_k, p_common, n_rare, self.tol, start=self.common.copy()
            )

    @property
    def finished(self) -> bool:
        """Converged once the clusters are fixed."""
        return self.converged

    def _point(self, label: int) -> np.ndarray:
        return np.concatenate([self.common, self.rare[label]])

    def configure_fit(self, server_round, client_ids):
        """Each site gets its cluster's coefficients and zeroed statistics."""
        config = self.client_config(server_round)
        if self.screening:
            return {c: FitInstruction(self.screen.message(), dict(config)) for c in client_ids}
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
        return out if self._delivery is None else self._delivery.attach(out)

    def aggregate_fit(self, server_round, results):
        """Cluster when due; per-cluster sums of the sites' statistics; one joint Newton step."""
        ordered: list[FitResult] = _sorted_results(results)
        self._received(ordered)
        if self.screening:
            mean = weighted_average([r.parameters for r in ordered], [r.n_samples for r in ordered])
            self._screen_step(ordered, mean, noise=0.0)
            return
        new = self._assign(server_round, ordered)
        sums = {}
        for label in sorted(set(new.values())):
            members = [r for r in ordered if new[r.client_id] == label]
            mean = weighted_average([r.parameters for r in members], [r.n_samples for r in members])
            n = float(sum(r.n_samples for r in members))
            sums[label] = _cluster_sums(mean, n)
        self._step(server_round, ordered, new, sums, noise=0.0)

    def _received(self, results: list[FitResult]) -> None:
        if self._delivery is not None:
            self._delivery.received(r.client_id for r in results)

    def secure_groups(self, server_round, results, *, min_clients, small_clusters):
        """One sum per cluster (small clusters merged or refused as FedCE's), ω = n_k / N_m."""
        ordered = _sorted_results(results)
        if self.screening:  # the floor's rounds: one sum over every site
            n = {r.client_id: float(r.n_samples) for r in ordered}
            return {"floor": SumGroup(tuple(n), tuple(sorted(self.screen.message())),
                                      normalised_weights(n))}  # fmt: skip
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
        self._received(ordered)
        if self.screening:
            group = sums["floor"]
            noise = float(group.error_bound) / max(float(group.weight), 1e-300)
            self._screen_step(ordered, group.mean(), noise=noise)
            return
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

    def _screen_step(self, ordered, mean, *, noise: float) -> None:
        """A floor round (top-k features); once the top k are chosen, the GLM starts there.

        ``noise`` is the largest error of an entry of ``mean`` (secure sums), else 0.
        """
        n = float(sum(r.n_samples for r in ordered))
        loss = sum(float(r.metrics["loss"]) * r.n_samples for r in ordered)
        self.screen.step(self.screen.message(), mean, n, loss, noise=n * noise)
        self.common = self.screen.estimate
        if self.screen.done:
            self.offset = self.screen.iterations
        self.client_ids = sorted(set(self.client_ids) | {r.client_id for r in ordered})

    def _step(self, server_round, ordered, new, sums, *, noise: float) -> None:
        """Assemble the joint system over the clusters and take the (damped) Newton step."""
        if self._reclusters(server_round):  # new clusters start from the global rare part
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
        clustered = server_round - self.offset >= self.cluster_round
        if clustered and self.search.converged:
            rare = {m: v.copy() for m, v in self.rare.items()}
            fit = {"common": self.common.copy(), "rare": rare}
            if self.path.converged(fit, server_round):
                self.search = NewtonSearch(self.tol)  # the next λ, from this fit
                self.search.next_point = nxt.copy()
        self.converged = self.path.done
        self.client_ids = sorted(set(self.client_ids) | {r.client_id for r in ordered})

    # --- the fitted models -------------------------------------------------------------------
    def parameters_for(self, client_id):
        """The site's cluster model as two-pathway parameters with the same logit.

        The last converged fit of the path; before it, the network the run started from (the
        floor).
        """
        fit = self.path.latest
        if fit is None:
            return copy_parameters(self.template)
        n_rare = glm_dimensions(self.template)[1]
        rare = rare_dosage_coef(fit["rare"][self.cluster_of(client_id)], self.features,
                                self.burden, self.top, n_rare)  # fmt: skip
        return linear_parameters(
            self.template, intercept=float(fit["common"][0]), common_coef=fit["common"][1:],
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
            "path": self.path.state_dict(),
            "converged": self.converged,
            "screen": None if self.screen is None else self.screen.state_dict(),
            "offset": self.offset,
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
        self.path = PenaltyPath.from_state_dict(state["path"])
        for fit in self.path.fits:  # a checkpoint keys the clusters by str
            fit["coef"] = {
                "common": np.asarray(fit["coef"]["common"], np.float64),
                "rare": {int(m): np.asarray(v, np.float64) for m, v in fit["coef"]["rare"].items()},
            }
        self.converged = bool(state["converged"])
        screen = state.get("screen")
        self.screen = None if screen is None else FloorScreen.from_state_dict(screen)
        self.offset = int(state.get("offset", 0))


def _cluster_sums(mean: Mapping[str, np.ndarray], n: float) -> tuple[np.ndarray, np.ndarray]:
    """(Σ gradient, Σ Hessian) of a cluster from its members' n_k-weighted mean statistics."""
    return (
        n * np.asarray(mean["glm.gradient"], np.float64),
        n * np.asarray(mean["glm.hessian"], np.float64),
    )
