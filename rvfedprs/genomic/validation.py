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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rvfedprs.evaluation.selection import RoundSelection
from rvfedprs.evaluation.summaries import BINS, pooled_validation
from rvfedprs.federation.rounds import require_replies
from rvfedprs.federation.task import Request, Transport
from rvfedprs.strategies.base import Strategy

__all__ = ["VALIDATE_STEP", "SiteValidation"]

log = logging.getLogger(__name__)

#: The site step that scores a model on the site's validation samples.
VALIDATE_STEP = "validate"


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
    bins : int
        Histogram bins of the sites' summaries.
    """

    def __init__(
        self,
        transport: Transport,
        settings: Mapping[str, Any],
        *,
        min_replies: int,
        criterion: str = "auc",
        bins: int = BINS,
    ) -> None:
        super().__init__(criterion=criterion)
        self.transport, self.settings = transport, dict(settings)
        self.min_replies, self.bins = int(min_replies), int(bins)
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
        requests = {
            c: Request(VALIDATE_STEP, {"parameters": strategy.parameters_for(c),
                                       "settings": self.settings, "bins": self.bins})
            for c in self.clients
        }  # fmt: skip
        summaries, failures = self.transport.query(requests, self.settings)
        count = f"{step}: only {len(summaries)} of {len(self.clients)} sites answered"
        require_replies(step, count, len(summaries), self.min_replies, failures)
        scores: dict[str, Any] = pooled_validation(summaries)
        self.tie_bounds.append(scores.pop("auc_tie_bound"))
        log.info("%s %s: validation AUC %.4f", strategy.name, step, scores["auc"])
        if failures:
            scores["validation_failed"] = dict(sorted(failures.items()))
        return scores

    def state_dict(self) -> dict[str, Any]:
        """As :class:`RoundSelection`, with the AUC's tie bound of every exchange."""
        return {**super().state_dict(), "auc_tie_bounds": list(self.tie_bounds)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(state)
        self.tie_bounds = list(state.get("auc_tie_bounds", []))
