"""A securely aggregated training round: fit without parameters, then the strategy's sums.

:func:`~rvfedprs.federation.rounds.run_rounds` hands a round to :meth:`SecureAggregation.fit_round`
when the job's configuration enables ``secagg``:

1. every instruction asks its site to hold its update (``secure_aggregation: {"hold": ...}``)
   and to make key pairs for :data:`KEY_SLOTS` sums (``key_slots``); the fit replies carry
   n_k, the loss, (FedCE) the Bloom filter and the public keys, no parameters; a reply
   whose n_k differs from the count its site declared at setup is refused
   (:class:`~rvfedprs.federation.screening.UpdateScreen`; the norm screen needs the update,
   which the server never sees — each site clips its own instead);
2. the strategy names the sums it needs (:meth:`~rvfedprs.strategies.base.Strategy.secure_groups`;
   FedCE clusters here, from the filters, and merges or refuses small clusters);
3. :func:`~rvfedprs.federation.secagg.server.secure_sum` computes them on those keys (so a
   secure round is four exchanges: the fit, share, mask, unmask), every site first
   scaling its update to L2 norm ≤ ``secagg.update_norm_bound`` (B); clients that drop out or
   misbehave on the way are moved from the replies to the round's failures;
4. a sum whose norm exceeds B·Σω_k of its members holds an update that was not clipped (a
   modified or poisoned client): the round is not applied as it stands. Group testing
   (:mod:`~.group_testing`) finds that member from further secure sums over subsets of the
   members (who still hold their updates), without revealing an honest one; the member is
   named in the round's failures and left out from then on, and every group it was in is
   summed again without it — the round a dropout of it would have given. When it cannot be
   isolated, :class:`~.protocol.ImplausibleSumError` stops the run;
5. :func:`~rvfedprs.federation.rounds.finish_round` gives the sums to
   :meth:`~rvfedprs.strategies.base.Strategy.aggregate_sums`. The sites keep their updates
   (a group test may need them) until the next round's fit replaces them;
   :meth:`SecureAggregation.release` has the last round's dropped when the run ends (one
   exchange a run, not one a round; after a failed round, at once).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any

from rvfedprs.federation.screening import UpdateScreen
from rvfedprs.federation.secagg.group_testing import isolate_culprit
from rvfedprs.federation.secagg.protocol import (
    SECURE_FIT_KEY,
    ImplausibleSumError,
    SecAggParams,
    SecureAggregationError,
)
from rvfedprs.federation.secagg.server import SumOutcome, release_held, secure_sum
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Replies, Transport
from rvfedprs.strategies.base import FitInstruction, FitResult, Strategy
from rvfedprs.strategies.secure import GroupSum, SumGroup, check_secure_aggregation

__all__ = ["SecureAggregation", "HELD_UPDATE"]

log = logging.getLogger(__name__)

#: The name a site holds its round update under.
HELD_UPDATE = "fit-update"
#: Key pairs each site makes with its fit: a member is in at most two of a round's sums (FedCE:
#: the backbone and its cluster's specialist); a third sum exchanges its own keys.
KEY_SLOTS = 2


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
        #: Client → why it is left out of every later round (its update exceeded the bound).
        self.left_out: dict[str, str] = {}
        #: Clients that still hold the last round's update (:meth:`release` drops them).
        self.holding: set[str] = set()

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
            ``secagg_faults`` (client → a fault that did not cost its update),
            ``secagg_clipped`` (client → the entries of its weighted update it clipped to
            ±``clipping_range`` before masking: ``values``, ``of``, ``fraction``),
            ``secagg_norm_clipped`` (the clients that scaled their update down to
            ``update_norm_bound``) and ``secagg_implausible`` (group → the norm of its sum
            and what its members' bounds allow, with ``group_tests``: the subset sums taken
            to find the member that did not clip).

        Raises
        ------
        ImplausibleSumError
            When a sum exceeds its members' norm bounds and group testing cannot isolate the
            member responsible without revealing an honest update (the round is not applied).
        SecureAggregationError
            When fewer than ``min_clients`` clients replied to the fit, or a sum fails (naming
            whom the sum lost and why, and the sites the round lost before it).
        ConfigError
            From the strategy (a small FedCE cluster with ``small_clusters: refuse``).
        """
        slots = [secrets.token_hex(8) for _ in range(KEY_SLOTS)]
        spec = {"hold": HELD_UPDATE, "key_slots": slots}
        marked = {
            c: FitInstruction(i.parameters, {**i.config, SECURE_FIT_KEY: spec})
            for c, i in instructions.items()
            if c not in self.left_out
        }
        self.holding -= set(marked)  # the fit replaces what they held
        fitted: Replies = transport.fit(server_round, marked, seeds, settings, client_state)
        declared = UpdateScreen(settings.get("declared_samples") or {}, factor=None)
        results, refused = declared.screen(server_round, fitted[0], marked)
        failures = {**fitted[1], **refused}
        failures.update({c: why for c, why in self.left_out.items() if c in instructions})
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
        run = int(settings.get("run_index", 0) or 0)
        round_seed = derive_seed(self.random_seed, "secagg", run, server_round)
        label = f"run {run} round {server_round}"

        def summed(
            sum_groups: dict[str, SumGroup], seed: int, what: str, advertised=None
        ) -> SumOutcome:
            return secure_sum(
                transport,
                settings,
                sum_groups,
                held=HELD_UPDATE,
                shapes=shapes,
                params=self.params,
                random_seed=seed,
                label=what,
                seen_keys=self.seen_keys,
                norm_bound=self.params.update_norm_bound,
                keep_held=True,  # group testing may need further sums of the updates
                advertised=advertised,
            )

        advertised = {c: r.secure_keys or {} for c, r in results.items()}
        holding: set[str] = set()
        applied = False
        try:
            try:
                outcome = summed(groups, round_seed, label, advertised)
            except SecureAggregationError as exc:
                if not failures:
                    raise
                # the sum names whom it lost; the round lost these before it (at the fit)
                lost = dict(sorted(failures.items()))
                raise SecureAggregationError(f"{exc}; lost before the secure sum: {lost}") from None
            holding = {c for s in outcome.sums.values() for c in s.included} - set(outcome.faults)
            for client, why in outcome.dropped.items():
                results.pop(client, None)
                failures[client] = f"secure aggregation: {why}"
            sums = dict(outcome.sums)
            group_tests = 0
            if outcome.implausible:
                culprits, sums, group_tests = self._without_culprits(
                    groups, sums, outcome.implausible, summed, round_seed, label, server_round
                )
                for client, why in culprits.items():
                    results.pop(client, None)
                    failures[client] = why
                    self.left_out[client] = f"{why} (in round {server_round})"
            applied = True
        finally:
            self.holding |= holding
            if not applied:
                self.release(transport, settings)
        notes: dict[str, Any] = {
            "secagg": {name: list(s.included) for name, s in sorted(sums.items())}
        }
        if outcome.faults:
            notes["secagg_faults"] = dict(outcome.faults)
        if outcome.clipped:
            notes["secagg_clipped"] = dict(outcome.clipped)
        if outcome.norm_clipped:
            notes["secagg_norm_clipped"] = list(outcome.norm_clipped)
        if outcome.implausible:
            notes["secagg_implausible"] = {**outcome.implausible, "group_tests": group_tests}
        return results, failures, sums, notes

    def release(self, transport: Transport, settings: Mapping[str, Any]) -> None:
        """Ask the sites still holding a round's update to drop it (the run's end, a failure)."""
        holding, self.holding = self.holding, set()
        release_held(transport, settings, holding, HELD_UPDATE)

    def _without_culprits(
        self, groups, sums, implausible, summed, round_seed: int, label: str, server_round: int
    ) -> tuple[dict[str, str], dict[str, GroupSum], int]:
        """Find the member of each implausible sum that did not clip; sum every group without.

        Returns
        -------
        culprits : dict of str to str
            Client → why it is left out (the round's ``failed`` entry).
        sums : dict of str to GroupSum
            Every group's sum without the culprits (the others unchanged).
        n_sums : int
            The group-testing sums taken (the sums without the culprits included).
        """
        bound, t = self.params.update_norm_bound, self.params.min_clients
        culprits: dict[str, str] = {}
        sums, n_sums = dict(sums), 0
        for name in sorted(implausible):
            group, members = groups[name], sums[name].included
            if set(members) & set(culprits):  # found in another group: its sum without it
                continue

            def is_implausible(subset, name=name, group=group):
                nonlocal n_sums
                n_sums += 1
                what = f"{label} group test {n_sums}"
                seed = derive_seed(round_seed, "group-test", n_sums)
                test = summed({name: SumGroup(subset, group.tensors, group.weights)}, seed, what)
                if test.dropped or test.sums[name].included != tuple(sorted(subset)):
                    raise SecureAggregationError(
                        f"{what}: group testing of {name!r} lost members {test.dropped}; the "
                        "round is not applied"
                    )
                return name in test.implausible, test.sums[name]

            culprit, rest, _ = isolate_culprit(
                members, is_implausible, min_clients=t, seed=round_seed, what=f"{label}: {name!r}"
            )
            sums[name] = rest
            culprits[culprit] = (
                f"secure aggregation: its update exceeds the norm bound secagg.update_norm_bound "
                f"= {bound:g} (found by group testing over sums of >= {t} members of "
                f"{name!r}); left out from round {server_round} on"
            )
        # every other group that holds a culprit's update: summed again without it
        redo = {
            name: SumGroup(
                tuple(set(s.included) - set(culprits)), groups[name].tensors, groups[name].weights
            )  # fmt: skip
            for name, s in sorted(sums.items())
            if set(s.included) & set(culprits)
        }
        too_small = {n: g.members for n, g in redo.items() if len(g.members) < t}
        if too_small:
            raise ImplausibleSumError(
                f"{label}: without {sorted(culprits)} the groups {too_small} have fewer than "
                f"secagg.min_clients = {t} members; the round is not applied"
            )
        if redo:
            n_sums += 1
            again = summed(redo, derive_seed(round_seed, "without-culprits"), f"{label} again")
            if again.dropped or again.implausible:
                raise ImplausibleSumError(
                    f"{label}: the sums without {sorted(culprits)} lost members "
                    f"{again.dropped or 'none'} or still exceed their norm bounds "
                    f"({again.implausible or 'no'}); the round is not applied"
                )
            sums.update(again.sums)
        return culprits, sums, n_sums
