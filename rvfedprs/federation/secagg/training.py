"""A securely aggregated training round: fit without parameters, then the strategy's sums.

:func:`~rvfedprs.federation.rounds.run_rounds` hands a round to :meth:`SecureAggregation.fit_round`
when the job's configuration enables ``secagg``:

1. every instruction asks its site to hold its update (``secure_aggregation: {"hold": ...}``);
   the fit replies carry n_k, the loss and (FedCE) the Bloom filter, no parameters; a reply
   whose n_k differs from the count its site declared at setup is refused
   (:class:`~rvfedprs.federation.screening.UpdateScreen`; the norm screen needs the update,
   which the server never sees — each site clips its own instead);
2. the strategy names the sums it needs (:meth:`~rvfedprs.strategies.base.Strategy.secure_groups`;
   FedCE clusters here, from the filters, and merges or refuses small clusters);
3. :func:`~rvfedprs.federation.secagg.server.secure_sum` computes them; clients that drop out
   or misbehave on the way are moved from the replies to the round's failures;
4. :func:`~rvfedprs.federation.rounds.finish_round` gives the sums to
   :meth:`~rvfedprs.strategies.base.Strategy.aggregate_sums`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rvfedprs.federation.screening import UpdateScreen
from rvfedprs.federation.secagg.protocol import (
    SECURE_FIT_KEY,
    SecAggParams,
    SecureAggregationError,
)
from rvfedprs.federation.secagg.server import secure_sum
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Replies, Transport
from rvfedprs.strategies.base import FitInstruction, FitResult, Strategy
from rvfedprs.strategies.secure import GroupSum, check_secure_aggregation

__all__ = ["SecureAggregation", "HELD_UPDATE"]

log = logging.getLogger(__name__)

#: The name a site holds its round update under.
HELD_UPDATE = "fit-update"


class SecureAggregation:
    """Secure aggregation of a job's training rounds (one per job; see the module docstring).

    Parameters
    ----------
    params : SecAggParams
    random_seed : int
        The job's master seed (quantisation seeds derive from it, the round and the group).
    """

    def __init__(self, params: SecAggParams, random_seed: int) -> None:
        self.params = params
        self.random_seed = int(random_seed)
        #: Every public key presented in this job (a client presenting one again is dropped).
        self.seen_keys: set[str] = set()

    @classmethod
    def from_job(cls, job: Mapping[str, Any]) -> SecureAggregation | None:
        """From the job's configuration (``config["secagg"]``); None when it is off."""
        section = (job.get("config") or {}).get("secagg") or {}
        if not section.get("enabled", False):
            return None
        return cls(SecAggParams.from_config(section), int(job["seed"]))

    def check(self, strategy: Strategy) -> None:
        """Refuse a strategy that cannot run with secure aggregation (ConfigError, naming why)."""
        check_secure_aggregation(strategy)

    def fit_round(
        self,
        strategy: Strategy,
        transport: Transport,
        server_round: int,
        instructions: Mapping[str, FitInstruction],
        seeds: Mapping[str, int],
        settings: Mapping[str, Any],
        client_state: dict[str, dict[str, Any]],
    ) -> tuple[dict[str, FitResult], dict[str, str], dict[str, GroupSum] | None, dict]:
        """One round: fit (updates held at the sites), the strategy's groups, their sums.

        Returns
        -------
        results : dict
            Client → its fit reply (no parameters), for clients whose update is in the sums.
        failures : dict
            Client → why its update is not (a failed fit, a sample count other than the one
            declared at setup, a dropout, a rejected message).
        sums : dict of str to GroupSum, or None
            None when no client replied to the fit.
        notes : dict
            For the round's history: ``secagg`` (group → included clients) and, if any,
            ``secagg_faults`` (client → a fault that did not cost its update) and
            ``secagg_clipped`` (client → the entries of its weighted update it clipped to
            ±``clipping_range`` before masking: ``values``, ``of``, ``fraction``).

        Raises
        ------
        SecureAggregationError
            When fewer than ``min_clients`` clients replied to the fit, or a sum fails (naming
            whom the sum lost and why, and the sites the round lost before it).
        ConfigError
            From the strategy (a small FedCE cluster with ``small_clusters: refuse``).
        """
        marked = {
            c: FitInstruction(i.parameters, {**i.config, SECURE_FIT_KEY: {"hold": HELD_UPDATE}})
            for c, i in instructions.items()
        }
        fitted: Replies = transport.fit(server_round, marked, seeds, settings, client_state)
        declared = UpdateScreen(settings.get("declared_samples") or {}, factor=None)
        results, refused = declared.screen(server_round, fitted[0], marked)
        failures = {**fitted[1], **refused}
        if not results:
            return results, failures, None, {}
        if len(results) < self.params.min_clients:
            raise SecureAggregationError(
                f"round {server_round}: only {len(results)} clients replied, fewer than "
                f"secagg.min_clients = {self.params.min_clients}: no sum may be taken; "
                f"failures: {dict(sorted(failures.items()))}"
            )
        groups = strategy.secure_groups(
            server_round,
            [results[c] for c in sorted(results)],
            min_clients=self.params.min_clients,
            small_clusters=self.params.small_clusters,
        )
        shapes = {
            name: tuple(value.shape)
            for name, value in instructions[sorted(results)[0]].parameters.items()
        }
        run = settings.get("run_index", 0)
        try:
            outcome = secure_sum(
                transport,
                settings,
                groups,
                held=HELD_UPDATE,
                shapes=shapes,
                params=self.params,
                random_seed=derive_seed(self.random_seed, "secagg", int(run or 0), server_round),
                label=f"run {run or 0} round {server_round}",
                seen_keys=self.seen_keys,
            )
        except SecureAggregationError as exc:
            if not failures:
                raise
            # the sum names whom it lost; the round lost these before it (at the fit)
            lost = dict(sorted(failures.items()))
            raise SecureAggregationError(f"{exc}; lost before the secure sum: {lost}") from None
        for client, why in outcome.dropped.items():
            results.pop(client, None)
            failures[client] = f"secure aggregation: {why}"
        notes: dict[str, Any] = {
            "secagg": {name: list(s.included) for name, s in sorted(outcome.sums.items())}
        }
        if outcome.faults:
            notes["secagg_faults"] = dict(outcome.faults)
        if outcome.clipped:
            notes["secagg_clipped"] = dict(outcome.clipped)
        return results, failures, outcome.sums, notes
