"""FedAssoc: federated rare-variant association under the floor model, on exact sums.

What consortia run as RAREMETAL/MetaSKAT, SAIGE-GENE+ or REGENIE's gene tests, on sums that add
up across sites (SPEC §7). Two phases, each a round of per-site sums averaged by n_k — so the
same aggregation runs in the clear and as one secure sum over every replying site:

1. **the floor** — the unpenalised logistic regression on [1, PRS, covariates], by the federated
   Newton rounds of :class:`~rvfedprs.strategies.newton.NewtonSearch` from β = 0, until the step
   is below ``tol`` at β̂;
2. **one association round** at β̂: every site returns its score sums
   (:func:`rvfedprs.association.sums.association_sums`) — scores, information, cross-information,
   each unit's information block, allele and carrier counts — in its group's row. The unit map
   (the ``burden`` section's regions or windows, every rare variant in them) crosses with this
   instruction, as the GLMs' burden map does.

The server then holds every group's summed statistics (:meth:`scores`), from which
:mod:`rvfedprs.association.table` computes the tests exactly as on the pooled data. A group is a
set of sites (``groups``: site → group name, e.g. FedCE's clusters or the user's grouping); none
given, there is one. Under secure aggregation a group's row is the sum over its sites, so every
group must hold at least ``secagg.min_clients`` replying sites, or the run is refused by name.

The scores are efficient only at the floor of the very samples they sum over (Σ Zᵀ(y − μ̂) = 0
there). A site lost in the association round (a killed node, under ``min_replies``) would break
that, so the server goes back to the floor's Newton rounds over the sites still answering, from
the floor it had, and asks for the association sums again; the run's record names the refit.

The model served is the floor (two-pathway parameters whose logit is its linear predictor), so
``rvfedprs train --strategy fedassoc`` evaluates as any other strategy.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.architecture import linear_parameters
from rvfedprs.association.scores import EfficientScores, floor_dispersion
from rvfedprs.association.sums import ASSOCIATION_TENSORS, UnitLayout, empty_sums
from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import (
    FitInstruction,
    GlobalModelStrategy,
    StrategyContext,
    config_section,
)
from rvfedprs.strategies.burden_delivery import BurdenDelivery
from rvfedprs.strategies.fedglm import glm_dimensions, glm_message
from rvfedprs.strategies.newton import NewtonSearch

__all__ = ["FedAssociation", "read_groups"]

log = logging.getLogger(__name__)

_PHASES = ("floor", "association", "done")


def read_groups(path: str) -> dict[str, str]:
    """Site → group from a TSV, or from a run's ``metrics.json`` (its ``clusters``: FedCE's).

    The TSV has a ``client`` (or ``site``) column and a ``group`` (or ``cluster``) column.

    Raises
    ------
    InputDataError
        For a missing file or one without those columns.
    """
    import json
    from pathlib import Path

    import pandas as pd

    from rvfedprs.exceptions import InputDataError

    file = Path(path)
    if not file.is_file():
        raise InputDataError(f"associate.groups: {path} does not exist")
    if file.suffix == ".json":
        clusters = json.loads(file.read_text()).get("clusters")
        if not isinstance(clusters, dict) or not clusters:
            raise InputDataError(f"associate.groups: {path} holds no 'clusters' of the sites")
        return {str(site): str(group) for site, group in clusters.items()}
    table = pd.read_csv(file, sep="\t", dtype=str)
    site = next((c for c in ("client", "site") if c in table.columns), None)
    group = next((c for c in ("group", "cluster") if c in table.columns), None)
    if site is None or group is None:
        raise InputDataError(
            f"associate.groups: {path} needs a client (or site) column and a group (or cluster) "
            f"column; it has {list(table.columns)}"
        )
    return dict(zip(table[site].astype(str), table[group].astype(str), strict=True))


class FedAssociation(GlobalModelStrategy):
    """The floor by federated Newton, then one round of association sums at it.

    Parameters
    ----------
    groups : mapping of site to group name, optional
        The groups the sums are kept for (every site of the run must have one); default: one.
    units : BurdenMap or callable returning one, optional
        The genes/regions whose information blocks are summed (its non-zero pattern); a
        callable is called at :meth:`initialize` (the server reads the variant table then).
        None: single-variant sums only.
    tol : float
        The floor's Newton tolerance.
    max_unit_variants : int
        The most variants one unit may hold (each site sends a p_g × p_g block per group).
    """

    name = "fedassoc"
    random_start = False  # the floor it serves is read from the template's shapes only

    def __init__(
        self,
        *,
        groups: Mapping[str, str] | None = None,
        units: Any = None,
        tol: float = 1e-10,
        max_unit_variants: int = 500,
    ) -> None:
        super().__init__()
        if not tol > 0:
            raise ValueError(f"tol must be > 0, got {tol}")
        self.groups = None if groups is None else {str(k): str(v) for k, v in groups.items()}
        self.tol = float(tol)
        self.max_unit_variants = int(max_unit_variants)
        self._units: Any = units
        self._delivery: BurdenDelivery | None = None
        self._reset()

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedAssociation:
        """From the ``associate`` section; its units from the ``burden`` section's regions."""
        section = config_section(config, "associate")
        groups = read_groups(section["groups"]) if section.get("groups") else None
        units = None
        if section["units"] == "burden":

            def units() -> Any:
                from rvfedprs.strategies import burden_of

                burden = dict(config_section(config, "burden"))
                burden.update(mask_column=None, annotations=None, weights="flat", max_maf=0.5)
                return burden_of({**config, "burden": burden}, context.variants)

        return cls(groups=groups, units=units, tol=float(section["tol"]),
                   max_unit_variants=int(section["max_unit_variants"]))  # fmt: skip

    def _reset(self) -> None:
        self.phase = "floor"
        self.floor_sites: list[str] = []  # the sites of the round the floor converged in
        self.refits: list[dict[str, Any]] = []
        self.search = NewtonSearch(self.tol)
        self.floor = np.zeros(0)
        self.sums: dict[str, np.ndarray] = {}
        self.floor_hessian = np.zeros((0, 0))
        self.dispersion = 1.0  # φ of the floor: a linear floor's residual variance
        self.estimates_dispersion = False

    # --- rounds ----------------------------------------------------------------------------
    def initialize(self, global_parameters, client_ids):
        """Start the floor at β = 0; build the unit map and each site's group.

        Raises
        ------
        ConfigError
            For a site without a group, or a unit with more than ``max_unit_variants``.
        """
        self.template = copy_parameters(global_parameters)
        self.client_ids = sorted(client_ids)
        n_covariates, self.n_rare = glm_dimensions(self.template)
        self.n_floor = 2 + n_covariates
        if self.groups is None:
            self.group_names, self.site_group = ["all"], dict.fromkeys(self.client_ids, 0)
        else:
            missing = [c for c in self.client_ids if c not in self.groups]
            if missing:
                raise ConfigError(f"associate.groups names no group for sites {missing}")
            self.group_names = sorted({self.groups[c] for c in self.client_ids})
            self.site_group = {c: self.group_names.index(self.groups[c]) for c in self.client_ids}
            unknown = sorted(set(self.groups) - set(self.client_ids))
            if unknown:
                log.warning("associate.groups lists sites that are not in this run, left "
                            "out: %s", unknown)  # fmt: skip
        units = self._unit_map()
        if units is None:
            self.layout = UnitLayout.from_members([], [])
        else:
            if units.matrix.shape[0] != self.n_rare:
                raise ConfigError(
                    f"the unit map has {units.matrix.shape[0]} variant rows but the federation "
                    f"{self.n_rare} rare-variant columns"
                )
            self.layout = UnitLayout.from_matrix(units.matrix, units.regions)
            sizes = zip(self.layout.names, (m.size for m in self.layout.members), strict=True)
            big = [(name, size) for name, size in sizes if size > self.max_unit_variants]
            if big:
                raise ConfigError(
                    f"units with more than associate.max_unit_variants {self.max_unit_variants} "
                    f"variants: {big[:5]}; use smaller regions (burden.window_bp) or raise it"
                )
        self._reset()
        self.search.next_point = np.zeros(self.n_floor)
        self.parameters = glm_message(self.search.next_point)

    def _unit_map(self) -> Any:
        """The unit map (built once from a callable), or None."""
        if callable(self._units):
            self._units = self._units()
        return self._units

    @property
    def finished(self) -> bool:
        """True once the association sums arrived."""
        return self.phase == "done"

    def client_config(self, server_round: int) -> dict[str, Any]:
        """The floor's sums (and, in the association round, the association sums)."""
        glm: dict[str, Any] = {"features": "floor", "hessian": True}
        if self.phase == "association":
            glm["association"] = {"n_groups": len(self.group_names)}
        return {"glm": glm}

    def configure_fit(self, server_round, client_ids):
        """Every site's instruction; in the association round with its group and the unit map."""
        instructions = super().configure_fit(server_round, client_ids)
        if self.phase != "association":
            return instructions
        units = self._unit_map()
        if units is not None and self._delivery is None:
            self._delivery = BurdenDelivery(units)
        out = {}
        for client, instruction in instructions.items():
            glm = dict(instruction.config["glm"])
            glm["association"] = {**glm["association"], "group": self.site_group[client]}
            if self._delivery is not None:
                glm.update(self._delivery.glm_config(client))
            out[client] = FitInstruction(instruction.parameters, {**instruction.config, "glm": glm})
        return out

    def aggregate_fit(self, server_round, results):
        """The floor's Newton step, or the association sums, from the n_k-weighted average."""
        self._observe(results)
        self._noise = 0.0
        super().aggregate_fit(server_round, results)

    def _observe(self, results) -> None:
        """Who replied, their samples, the summed loss and whether a dispersion is estimated."""
        self._replied = sorted(r.client_id for r in results)
        self._n_total = float(sum(r.n_samples for r in results))
        self._loss = float(sum(r.metrics["loss"] * r.n_samples for r in results))
        self.estimates_dispersion = any(r.metrics.get("estimates_dispersion") for r in results)

    def secure_groups(self, server_round, results, *, min_clients, small_clusters):
        """One sum over every site; refused when a group would be the sum of too few sites.

        Raises
        ------
        ConfigError
            In the association round, naming the groups with fewer than ``min_clients`` sites.
        """
        if self.phase == "association" and len(self.group_names) > 1:
            counts = {name: 0 for name in self.group_names}
            for result in results:
                counts[self.group_names[self.site_group[result.client_id]]] += 1
            small = {name: n for name, n in counts.items() if n < min_clients}
            if small:
                raise ConfigError(
                    f"round {server_round}: association groups {small} have fewer than "
                    f"secagg.min_clients = {min_clients} replying sites: a group's sum would "
                    "reveal its sites' statistics; merge the groups (associate.groups)"
                )
        return super().secure_groups(
            server_round, results, min_clients=min_clients, small_clusters=small_clusters
        )

    def aggregate_sums(self, server_round, results, sums):
        """As :meth:`aggregate_fit`, from the secure sum (its error bounds the tolerance)."""
        self._observe(results)
        self._noise = float(sums["model"].error_bound) / max(float(sums["model"].weight), 1e-300)
        super().aggregate_sums(server_round, results, sums)

    def server_update(self, server_round: int, average: Parameters) -> Parameters:
        """A floor Newton step; once converged, the association round's message; then nothing."""
        sent, n = self.parameters, self._n_total

        def total(name: str) -> np.ndarray:
            return n * (np.asarray(average[name], np.float64) - sent[name])

        point = np.asarray(sent["glm.coef"], np.float64)
        if self.phase == "floor":
            self.search.step(point, self._loss, total("glm.gradient"), total("glm.hessian"),
                             np.zeros(point.size), noise=n * self._noise)  # fmt: skip
            if not self.search.converged:
                return glm_message(self.search.next_point)
            self.floor, self.phase, self.floor_sites = point.copy(), "association", self._replied
            self.dispersion = floor_dispersion(self._loss, n, self.n_floor,
                                               self.estimates_dispersion)  # fmt: skip
            message = glm_message(point)
            message.update(empty_sums(len(self.group_names), self.n_floor, self.n_rare,
                                      self.layout))  # fmt: skip
            return message
        if self.phase == "association" and self._replied != self.floor_sites:
            lost = sorted(set(self.floor_sites) - set(self._replied))
            log.warning("round %d: %s did not send association sums; the floor is refitted over "
                        "the %d sites left", server_round, lost, len(self._replied))  # fmt: skip
            self.refits.append({"round": int(server_round), "lost": lost})
            self.phase, self.search = "floor", NewtonSearch(self.tol)
            self.search.next_point = self.floor.copy()
            return glm_message(self.floor)
        if self.phase == "association":
            self.sums = {name: total(name) for name in ASSOCIATION_TENSORS}
            self.floor_hessian = total("glm.hessian")
            self.phase = "done"
        return copy_parameters(sent)

    # --- results ---------------------------------------------------------------------------
    def scores(self) -> EfficientScores:
        """The summed statistics as efficient scores.

        Raises
        ------
        ConfigError
            Before the association round's sums arrived.
        """
        if self.phase != "done":
            raise ConfigError(
                f"the association sums have not arrived (phase {self.phase!r} after "
                f"{self.search.iterations} floor rounds: give the run more rounds)"
            )
        return EfficientScores(self.sums, self.floor_hessian, self.layout,
                               dispersion=self.dispersion)  # fmt: skip

    def parameters_for(self, client_id):
        """The floor as network parameters (the template before its first step)."""
        if self.floor.size == 0 and self.search.iterations == 0:
            return copy_parameters(self.template)
        coef = self.floor if self.floor.size else self.search.next_point
        return linear_parameters(self.template, intercept=float(coef[0]), common_coef=coef[1:])

    def state_dict(self):
        """Phase, floor search, sums, groups and layout."""
        state = super().state_dict()
        state.update(
            template=copy_parameters(self.template),
            phase=self.phase,
            search=self.search.state_dict(),
            floor=self.floor.copy(),
            floor_sites=list(self.floor_sites),
            refits=[dict(r) for r in self.refits],
            sums={k: v.copy() for k, v in self.sums.items()},
            floor_hessian=self.floor_hessian.copy(),
            dispersion=float(self.dispersion),
            estimates_dispersion=bool(self.estimates_dispersion),
            group_names=list(self.group_names),
            site_group=dict(self.site_group),
            unit_names=list(self.layout.names),
            unit_members=[m.tolist() for m in self.layout.members],
            n_floor=self.n_floor,
            n_rare=self.n_rare,
        )
        return state

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict` (the unit map is resent if a round remains)."""
        super().load_state_dict(state)
        self.template = copy_parameters(state["template"])
        self.phase = str(state["phase"])
        self.search = NewtonSearch.from_state_dict(state["search"])
        self.floor = np.asarray(state["floor"], np.float64)
        self.floor_sites = [str(c) for c in state.get("floor_sites", [])]
        self.refits = [dict(r) for r in state.get("refits", [])]
        self.sums = {k: np.asarray(v, np.float64) for k, v in state["sums"].items()}
        self.floor_hessian = np.asarray(state["floor_hessian"], np.float64)
        self.dispersion = float(state.get("dispersion", 1.0))
        self.estimates_dispersion = bool(state.get("estimates_dispersion", False))
        self.group_names = list(state["group_names"])
        self.site_group = {str(k): int(v) for k, v in state["site_group"].items()}
        self.layout = UnitLayout.from_members(state["unit_names"], state["unit_members"])
        self.n_floor, self.n_rare = int(state["n_floor"]), int(state["n_rare"])

    def summary(self) -> dict[str, Any]:
        """The floor's coefficients and rounds, the groups and the units."""
        return {
            "floor": self.floor.tolist(),
            "floor_rounds": self.search.iterations,
            "converged": bool(self.search.converged),
            "dispersion": float(self.dispersion),
            "groups": list(self.group_names),
            "units": self.layout.n_units,
            "floor_sites": list(self.floor_sites),
            "refits": [dict(r) for r in self.refits],
        }
