"""Choices on validation data held at the sites, from their summaries, on every engine.

With ``train.validation_fraction`` > 0 every site holds out that share of its own training
samples (stratified by phenotype, drawn from the run's split seed and its id:
:func:`~rvfedprs.evaluation.selection.held_out_rows`) and trains on the rest. After the warm
start and after every round the server sends each site the model it would use; the site scores
its validation samples and sends a summary (:func:`~rvfedprs.evaluation.summaries.
validation_summary`: counts, score histograms, the log-loss sum — nothing per sample). The
server pools them (the AUC from the histograms, within the tie bound it reports of the exact
pooled AUC; the log-loss exact) and keeps the best round's models, the floor the first
candidate (:class:`SiteValidation`). The same exchange runs in one process, on Flower and in a
study, so a seed gives the same choice everywhere.

Under secure aggregation (``secagg.enabled``) the summaries are a secure sum: each site holds
its summary as integer vectors (dense histograms on :data:`~rvfedprs.evaluation.summaries.
SECURE_BINS` bins, its counts and its log-loss sum in fixed point) and the server learns only
their sum over the sites (:func:`~rvfedprs.federation.secagg.server.secure_sum`), from which the
pooled AUC (within its tie bound, on the coarser bins) and log-loss follow as in the clear.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from rvfedprs.evaluation.selection import RoundSelection
from rvfedprs.evaluation.summaries import BINS, SECURE_BINS
from rvfedprs.federation.rounds import require_replies
from rvfedprs.federation.secagg.protocol import SecAggParams
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Request, Transport
from rvfedprs.outcomes import outcome
from rvfedprs.strategies.base import Strategy
from rvfedprs.strategies.secure import SumGroup

__all__ = ["VALIDATE_STEP", "HELD", "SiteValidation"]

log = logging.getLogger(__name__)

#: The site step that scores a model on the site's validation samples.
VALIDATE_STEP = "validate"
#: The name a site holds its validation summary under for a secure sum.
HELD = "validation"
#: Integer sums of validation summaries run modulo 2^62.
_MODULUS_BITS = 62


class SiteValidation(RoundSelection):
    """:class:`~rvfedprs.evaluation.selection.RoundSelection` from the sites' summaries.

    Parameters
    ----------
    transport : Transport
        The run's sites.
    settings : mapping
        The run settings (with ``validation``); replaced by those after the warm start
        (:meth:`prepare`), whose network the sites score.
    min_replies : int
        Fewest sites a validation exchange needs
        (:func:`~rvfedprs.federation.rounds.require_replies`); a site lost is named in the
        round's entry (``validation_failed``) and the round scored over the others.
    criterion : str
    bins : int, optional
        Histogram bins of the sites' summaries (default: 2^20 in the clear,
        :data:`~rvfedprs.evaluation.summaries.SECURE_BINS` summed securely).
    secure : SecAggParams, optional
        Sum the summaries securely with these parameters (None: in the clear).
    seed : int
        The run's master seed (each secure sum's quantisation seed derives from it).
    """

    def __init__(
        self,
        transport: Transport,
        settings: Mapping[str, Any],
        *,
        min_replies: int,
        criterion: str | None = None,
        bins: int | None = None,
        secure: SecAggParams | None = None,
        seed: int = 0,
    ) -> None:
        self.kind = outcome((settings.get("outcome") or {}).get("kind"))
        super().__init__(criterion=criterion, kind=self.kind)
        self.transport, self.settings = transport, dict(settings)
        self.secure, self.seed = secure, int(seed)
        self.bins = int(bins or (BINS if secure is None else SECURE_BINS))
        self.min_replies = int(min_replies)
        self.tie_bounds: list[float] = []

    @property
    def clients(self) -> list[str]:
        """The run's sites."""
        return self.transport.client_ids

    def prepare(self, settings: Mapping[str, Any]) -> None:
        """Score the network of the run settings after the warm start."""
        self.settings = dict(settings)

    def score(self, strategy: Strategy, server_round: int) -> dict[str, Any]:
        """Every site scores its validation samples with its model; the pooled scores.

        Raises
        ------
        FederationError
            When fewer than ``min_replies`` sites answered (naming the others and why).
        """
        step = f"round {server_round} validation" if server_round else "floor validation"
        secure = self.secure is not None
        requests = {
            c: Request(VALIDATE_STEP, {"parameters": strategy.parameters_for(c),
                                       "settings": self.settings, "bins": self.bins,
                                       "secure": secure})
            for c in self.clients
        }  # fmt: skip
        summaries, failures = self.transport.query(requests, self.settings)
        count = f"{step}: only {len(summaries)} of {len(self.clients)} sites answered"
        require_replies(step, count, len(summaries), self.min_replies, failures)
        if secure:
            total, lost = self._secure_sum(sorted(summaries), step, server_round)
            failures = {**failures, **lost}
            summed = len(self.clients) - len(failures)
            count = f"{step}: only {summed} of {len(self.clients)} sites in the secure sum"
            require_replies(step, count, summed, self.min_replies, failures)
            scores: dict[str, Any] = self.kind.summed_validation(total)
        else:
            scores = self.kind.pooled_validation(summaries)
        if "auc_tie_bound" in scores:
            self.tie_bounds.append(scores.pop("auc_tie_bound"))
        log.info("%s %s: validation %s %.4f", strategy.name, step, self.metric,
                 scores[self.metric])  # fmt: skip
        if failures:
            scores["validation_failed"] = dict(sorted(failures.items()))
        return scores

    def _secure_sum(
        self, sites: list[str], step: str, server_round: int
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Σ of the held summaries of ``sites``; (the totals, site → why it is not in them)."""
        from rvfedprs.federation.secagg.server import secure_sum

        shapes = self.kind.secure_shapes(self.bins)
        outcome = secure_sum(
            self.transport.subset(sites),
            self.settings,
            {"all": SumGroup(tuple(sites), tuple(shapes))},
            held=HELD,
            shapes=shapes,
            params=dataclasses.replace(self.secure, modulus_bits=_MODULUS_BITS),
            random_seed=derive_seed(self.seed, "validation-sum", server_round),
            label=step,
        )
        return outcome.sums["all"].total, dict(outcome.dropped)

    def state_dict(self) -> dict[str, Any]:
        """As :class:`RoundSelection`, with the AUC's tie bound of every exchange."""
        return {**super().state_dict(), "auc_tie_bounds": list(self.tie_bounds)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(state)
        self.tie_bounds = list(state.get("auc_tie_bounds", []))
