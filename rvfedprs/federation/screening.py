"""Updates the server refuses before aggregating them in the clear (issue 30, item 3).

A site's reply is aggregated with weight n_k and moves the model by its update Δw_k. Two ways
one site can take over the federation without tripping any shape or finiteness check:

- **an inflated sample count**: the weight comes from the reply's ``n``. The count each site
  declared before training is the only one accepted afterwards (fixed once, on every entry
  point, by :func:`~rvfedprs.federation.rounds.declare_samples`: from its ``setup`` report, or
  in a study from its features summary);
- **a scaled update** (×1e6, finite): the update's norm is compared with the round's median;
  one above ``factor`` × the median is refused (with at least 3 replies, so a median means
  something). ``train.update_norm_factor`` sets the factor (100 by default: honest sites of
  different sizes and data stay well inside it — 10 refused one at 10.5× in a test federation;
  null turns the check off).

Each refusal names the site and the numbers; the round then goes on with the others, under the
same ``min_replies`` rule as a lost reply. Under secure aggregation the server never sees an
update, so only the count is checked here; the sites clip their own updates before masking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rvfedprs.strategies.base import FitInstruction, FitResult

__all__ = ["UpdateScreen", "update_norm"]


def update_norm(result: FitResult, sent: Mapping[str, np.ndarray]) -> float | None:
    """‖w_k − w_sent‖ over the tensors sent (None for a reply without parameters)."""
    if not result.parameters:
        return None
    total = 0.0
    for name, start in sent.items():
        if name in result.parameters:
            diff = np.asarray(result.parameters[name], np.float64) - np.asarray(start, np.float64)
            total += float(np.sum(diff * diff))
    return float(np.sqrt(total))


@dataclass(frozen=True)
class UpdateScreen:
    """The refusal rules of a run.

    Attributes
    ----------
    declared : mapping of site to int
        Each site's training-sample count from its setup report (empty: not checked).
    factor : float or None
        Refuse an update whose norm exceeds ``factor`` × the round's median norm.
    """

    declared: Mapping[str, int]
    factor: float | None = 100.0

    def screen(
        self,
        server_round: int,
        results: Mapping[str, FitResult],
        instructions: Mapping[str, FitInstruction],
    ) -> tuple[dict[str, FitResult], dict[str, str]]:
        """The results kept, and site → why each refused one was refused."""
        kept, refused = dict(results), {}
        for site, result in sorted(results.items()):
            want = self.declared.get(site)
            if want is not None and int(result.n_samples) != int(want):
                refused[site] = (
                    f"round {server_round}: reports {result.n_samples} training samples, "
                    f"{want} declared at setup (the aggregation weight is the declared count)"
                )
        for site in refused:
            kept.pop(site)
        if self.factor is None or len(kept) < 3:
            return kept, refused
        norms = {s: update_norm(r, instructions[s].parameters) for s, r in kept.items()}
        known = {s: v for s, v in norms.items() if v is not None}
        if len(known) < 3:
            return kept, refused
        median = float(np.median(list(known.values())))
        for site, value in sorted(known.items()):
            if median > 0 and value > self.factor * median:
                refused[site] = (
                    f"round {server_round}: update norm {value:.4g} is "
                    f"{value / median:.3g} x the round's median {median:.4g} "
                    f"(train.update_norm_factor = {self.factor:g})"
                )
                kept.pop(site)
        return kept, refused
