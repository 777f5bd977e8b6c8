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

**Top-k features** (``top_k``, ``burden+top_k``): the floor's Newton rounds come first,
carrying the sites' score sums; the top k are chosen there, once, on every site's training data
(:class:`~rvfedprs.strategies.top_variants.FloorScreen`). One column list serves every cluster,
so the joint system keeps its layout. ``selection`` says how they are ranked:

- ``pooled`` (default): one sum over every site a round, the pooled U² / V; rounds 1,
  ``cluster_round``, ... above count from the end of the floor's rounds (the global step starts
  from the floor). A shared variant with opposite effects in two clusters has pooled scores that
  cancel and may be missed.
- ``clusters`` / ``both``: the sites' Bloom filters at the floor (the first floor round) are
  clustered, every floor round is summed per cluster (one secure sum per cluster), and the
  variants are ranked by the heterogeneous score test over the clusters' scores (``both``: the
  Bonferroni minimum of it and the pooled test), which sees a flipped effect (issue 40). The
  clusters are then kept: the joint per-cluster fit starts from the floor with no global step.

**Partial pooling** (``l2_cluster``): each cluster's rare coefficients are β_m = β̄ + δ_m, a
part shared by every cluster and a cluster's deviation, with the penalty
λ/2 ‖β̄‖² + λ_c/2 Σ_m ‖δ_m‖² (λ = ``l2``, λ_c = ``l2_cluster``): a large λ_c is the global
rare model, a small one independent clusters; a shared variant borrows strength from every
site and a flipped one can still flip. Fitted by the same exact Newton on the per-cluster sums,
in the coordinates (common, β̄, δ_1 … δ_M); the candidates are the converged fits on the grid
of (λ, λ_c), λ largest first, then λ_c largest first, each from the previous fit.
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
    narrower_glm,
    penalty_vector,
    rare_dosage_coef,
)
from rvfedprs.strategies.penalty_path import PenaltyPath
from rvfedprs.strategies.secure import SumGroup, normalised_weights
from rvfedprs.strategies.top_variants import SELECTIONS, FloorScreen, ScreenedGLM
from rvfedprs.training.glm import TOP_K_FEATURES, glm_width, resolved_top_k

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
    glm_top_k : int, optional
        k of the top-k features (``fedglm.top_k``; ``fedce.top_k`` is the Bloom filter's), chosen
        globally before clustering; None: 30 with top-k features, 0 otherwise.
    cluster_round : int
        The round whose filters are clustered (≥ 2: round 1 fits the global model first).
    selection : {"pooled", "clusters", "both"}
        How the top-k variants are ranked (:data:`~rvfedprs.strategies.top_variants.SELECTIONS`);
        the per-cluster rankings cluster the sites at the floor.
    l2_cluster : float or list of float, optional
        λ_c > 0 of the clusters' deviations δ_m from the shared rare part (partial pooling;
        ``l2`` is then the shared part's λ > 0); None: independent per-cluster coefficients
        with penalty ``l2``.
    **fedce
        FedCE's clustering options (``n_clusters``, ``top_k``, ``bloom_capacity``, ...).
    """

    name = "fedce_glm"
    tuning_axes = {
        "fedce.n_clusters": [2, 3, 4],
        "fedglm.top_k": [10, 30, 100],
        "fedglm.selection": ["clusters", "both"],
    }
    tuning_path = {
        "fedglm.l2": [3000.0, 300.0, 30.0, 3.0],
        "fedglm.l2_cluster": [300.0, 30.0, 3.0],
    }

    def __init__(
        self,
        *,
        features: str = "top_k",
        l2: float | list[float] = 1.0,
        penalize: str = "rare",
        tol: float = 1e-10,
        max_features: int = 2000,
        burden: Any = None,
        glm_top_k: int | None = None,
        cluster_round: int = 2,
        selection: str = "pooled",
        l2_cluster: float | list[float] | None = None,
        **fedce: Any,
    ) -> None:
        fedce.pop("head_aggregation", None)  # no head: the model is linear
        super().__init__(**fedce)
        if features == "floor":
            raise ValueError("features 'floor' has no rare part to fit per cluster")
        glm_top_k = resolved_top_k(features, glm_top_k)
        check_glm_features(features, burden, glm_top_k)
        # refuses a negative, infinite or empty l2 (and a zero one under partial pooling)
        self.path = PenaltyPath(l2, cluster=l2_cluster)
        if selection not in SELECTIONS:
            raise ValueError(f"selection {selection!r} unknown; choose from {list(SELECTIONS)}")
        if selection != "pooled" and features not in TOP_K_FEATURES:
            raise ValueError(
                f"selection {selection!r} ranks the top-k variants; features {features!r} has "
                f"none (use top_k or burden+top_k)"
            )
        self.selection = selection
        self.l2_cluster = l2_cluster
        self.partial_pooling = l2_cluster is not None
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
        self.shared = np.zeros(0)  # β̄ under partial pooling
        self.search = NewtonSearch(self.tol)
        self.screen: FloorScreen | None = None
        self.offset = 0  # the floor's rounds before the top-k choice
        self.converged = False

    @property
    def l2(self) -> float | tuple[float, float]:
        """The λ being fitted (the path's current one; (λ, λ_c) under partial pooling)."""
        return self.path.l2

    @property
    def clusters_at_floor(self) -> bool:
        """Whether the sites are clustered at the floor (a per-cluster top-k selection)."""
        return self.selection != "pooled"

    @property
    def fixed_clusters(self) -> bool:
        """True once the floor's clusters are kept for the joint fit (no reclustering)."""
        return self.clusters_at_floor and self.screen is not None and self.screen.done

    # --- layout ------------------------------------------------------------------------------
    def _widths(self) -> tuple[int, int]:
        n_covariates, n_rare = glm_dimensions(self.template)
        n_burden = 0 if self.burden is None else self.burden.n_regions
        width = glm_width(self.features, n_covariates, n_rare, n_burden, self.glm_top_k)
        return 2 + n_covariates, width - 2 - n_covariates

    def _reclusters(self, server_round: int) -> bool:
        if self.clusters_at_floor:  # once, in the floor's first round
            return self.screening and self.screen.iterations == 0
        return not self.screening and server_round - self.offset == self.cluster_round

    def client_config(self, server_round: int) -> dict[str, Any]:
        """GLM sums on the features; the Bloom filter of influential variants in every round.

        In the floor's rounds of top-k features: the floor's and score sums, no filter.
        """
        if self.screening:
            if self.clusters_at_floor:  # and the filters the clusters come from
                return {**super().client_config(server_round), "influence": False,
                        "glm": FloorScreen.config()}  # fmt: skip
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
                f"cluster, more than max_features {self.max_features}; "
                + narrower_glm(self.features, self.glm_top_k)
            )
        floor = linear_floor(self.template)
        self.common = np.zeros(p_common) if floor is None else floor
        self.rare = {0: np.zeros(p_rare)}
        self.shared = np.zeros(p_rare)
        self.search = NewtonSearch(self.tol)
        self.path.restart()
        self.converged = False
        self.offset = 0
        self.screen = None
        if self.features in TOP_K_FEATURES:
            start = self.common.copy()
            self.screen = FloorScreen(
                self.glm_top_k, p_common, n_rare, self.tol, start=start, selection=self.selection
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
            new = self._screen_assignment(server_round, ordered)
            groups = {}
            for label in sorted(set(new.values())):
                members = [r for r in ordered if new[r.client_id] == label]
                mean = weighted_average([r.parameters for r in members],
                                        [r.n_samples for r in members])  # fmt: skip
                groups[label] = (mean, float(sum(r.n_samples for r in members)))
            self._screen_step(ordered, groups, noise=0.0)
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
        if self.screening:  # the floor's rounds: one sum over every site, or per cluster
            new = self._screen_assignment(server_round, ordered, min_clients, small_clusters)
            self._pending = {"assignment": dict(new)}
            n = {r.client_id: float(r.n_samples) for r in ordered}
            tensors = tuple(sorted(self.screen.message()))
            groups = {}
            for label in sorted(set(new.values())):
                members = {c: n[c] for c in n if new[c] == label}
                groups[f"floor-{label}"] = SumGroup(tuple(members), tensors,
                                                    normalised_weights(members))  # fmt: skip
            return groups
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
            new, groups, noise = self._pending["assignment"], {}, 0.0
            for label in sorted(set(new.values())):
                group = sums[f"floor-{label}"]
                n = float(sum(r.n_samples for r in ordered if new[r.client_id] == label))
                groups[label] = (group.mean(), n)
                noise += n * float(group.error_bound) / max(float(group.weight), 1e-300)
            self._pending = {}
            self._screen_step(ordered, groups, noise=noise)
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

    def _screen_assignment(
        self, server_round: int, ordered, min_clients: int = 1, small_clusters: str = "merge"
    ) -> dict[str, int]:
        """A floor round's groups: every site in one, or the clusters of the sites' filters."""
        if not self.clusters_at_floor:
            return {r.client_id: 0 for r in ordered}
        new = self.secure_assignment(server_round, ordered, min_clients, small_clusters)
        self.assignment.update(new)
        return new

    def _screen_step(self, ordered, groups, *, noise: float) -> None:
        """A floor round (top-k features); once the top k are chosen, the GLM starts there.

        ``groups``: per group, the members' n_k-weighted mean reply and their samples;
        ``noise`` the largest error of an entry of the summed statistics (secure sums), else 0.
        """
        loss = sum(float(r.metrics["loss"]) * r.n_samples for r in ordered)
        estimates = any(r.metrics.get("estimates_dispersion") for r in ordered)
        self.screen.step(self.screen.message(), groups, loss, noise=noise,
                         estimates_dispersion=estimates)  # fmt: skip
        self.common = self.screen.estimate
        if self.screen.done:
            self.offset = self.screen.iterations
            if self.clusters_at_floor:  # the clusters stay; each starts at the floor
                p_rare = self._widths()[1]
                self.rare = {m: np.zeros(p_rare) for m in sorted(set(self.assignment.values()))}
        self.client_ids = sorted(set(self.client_ids) | {r.client_id for r in ordered})

    def _step(self, server_round, ordered, new, sums, *, noise: float) -> None:
        """Assemble the joint system over the clusters and take the (damped) Newton step."""
        if self._reclusters(server_round):  # new clusters start from the global rare part
            start = self.rare[0] if 0 in self.rare else next(iter(self.rare.values()))
            self.rare = {label: start.copy() for label in sorted(set(new.values()))}
            self.shared = start.copy()
            self.search = NewtonSearch(self.tol)
        self.assignment.update(new)
        labels = sorted(self.rare)
        p_c, p_r = self.common.size, next(iter(self.rare.values())).size
        size = p_c + len(labels) * p_r
        fitted = size + (p_r if self.partial_pooling else 0)
        if fitted > self.max_features:
            raise ConfigError(
                f"FedCE-GLM's joint system has {fitted} coefficients ({len(labels)} clusters), "
                f"more than max_features {self.max_features}; fewer clusters (fedce.n_clusters), "
                + narrower_glm(self.features, self.glm_top_k)
            )
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
        point = self.search_point()
        if self.partial_pooling:  # in (common, β̄, δ_m): β_m = β̄ + δ_m, so g ← Tᵀ g, H ← Tᵀ H T
            to_clusters = _pooling_map(p_c, p_r, len(labels))
            gradient, hessian = to_clusters.T @ gradient, to_clusters.T @ hessian @ to_clusters
            l2_shared, l2_cluster = self.l2
            penalty = penalty_vector(p_c + p_r, l2_shared, self.penalize, p_c - 2)
            penalty = np.concatenate([penalty, np.full(len(labels) * p_r, l2_cluster)])
            noise *= len(labels)  # an entry of Tᵀ g or Tᵀ H T sums up to M clusters' entries
        else:
            penalty = penalty_vector(size, self.l2, self.penalize, p_c - 2)
        self.search.step(point, loss, gradient, hessian, penalty, noise=noise)
        nxt = self.search.next_point
        if self.partial_pooling:
            self.shared = nxt[p_c : p_c + p_r].copy()
            nxt = to_clusters @ nxt  # back to (common, β_1 … β_M)
        self.common = nxt[:p_c].copy()
        self.rare = {
            m: nxt[p_c + i * p_r : p_c + (i + 1) * p_r].copy() for i, m in enumerate(labels)
        }
        clustered = self.fixed_clusters or server_round - self.offset >= self.cluster_round
        if clustered and self.search.converged:
            rare = {m: v.copy() for m, v in self.rare.items()}
            fit = {"common": self.common.copy(), "rare": rare}
            if self.path.converged(fit, server_round):
                self.search = NewtonSearch(self.tol)  # the next λ, from this fit
                self.search.next_point = self.search_point()
        self.converged = self.path.done
        self.client_ids = sorted(set(self.client_ids) | {r.client_id for r in ordered})

    def search_point(self) -> np.ndarray:
        """The current coefficients in the Newton search's coordinates."""
        labels = sorted(self.rare)
        if self.partial_pooling:
            return np.concatenate([self.common, self.shared,
                                   *[self.rare[m] - self.shared for m in labels]])  # fmt: skip
        return np.concatenate([self.common, *[self.rare[m] for m in labels]])

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
            "shared": self.shared.copy(),
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
        self.shared = np.asarray(state.get("shared", np.zeros(0)), np.float64).copy()


def _pooling_map(n_common: int, n_rare: int, n_clusters: int) -> np.ndarray:
    """T with (common, β_1 … β_M) = T (common, β̄, δ_1 … δ_M), β_m = β̄ + δ_m."""
    out = np.zeros((n_common + n_clusters * n_rare, n_common + (n_clusters + 1) * n_rare))
    out[:n_common, :n_common] = np.eye(n_common)
    eye = np.eye(n_rare)
    for m in range(n_clusters):
        rows = slice(n_common + m * n_rare, n_common + (m + 1) * n_rare)
        out[rows, n_common : n_common + n_rare] = eye
        out[rows, n_common + (m + 1) * n_rare : n_common + (m + 2) * n_rare] = eye
    return out


def _cluster_sums(mean: Mapping[str, np.ndarray], n: float) -> tuple[np.ndarray, np.ndarray]:
    """(Σ gradient, Σ Hessian) of a cluster from its members' n_k-weighted mean statistics."""
    return (
        n * np.asarray(mean["glm.gradient"], np.float64),
        n * np.asarray(mean["glm.hessian"], np.float64),
    )
