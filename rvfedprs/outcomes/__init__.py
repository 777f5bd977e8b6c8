"""The phenotype's kind as one object (SPEC §4, "Outcomes"): binary or quantitative.

:class:`~rvfedprs.outcomes.base.Outcome` says what every kind answers; :data:`OUTCOMES` lists
the kinds by the name a configuration uses (``pipeline.phenotype.kind``) and a prepared
federation records (``outcome.json``). The site data carry their outcome
(:class:`~rvfedprs.training.data.ClientData`), so the layers above ask it rather than test for
a kind.
"""

from __future__ import annotations

from rvfedprs.exceptions import ConfigError
from rvfedprs.outcomes.base import Outcome
from rvfedprs.outcomes.binary import Binary
from rvfedprs.outcomes.quantitative import Quantitative

__all__ = [
    "Outcome",
    "Binary",
    "Quantitative",
    "OUTCOMES",
    "BINARY",
    "QUANTITATIVE",
    "outcome",
    "register_outcome",
]

#: Every outcome kind by name.
OUTCOMES: dict[str, type[Outcome]] = {"binary": Binary, "quantitative": Quantitative}


def register_outcome(cls: type[Outcome]) -> type[Outcome]:
    """Register the outcome class ``cls`` under its :attr:`~Outcome.kind` (usable as a decorator).

    Raises
    ------
    ConfigError
        For a class that is not an :class:`Outcome`, or a kind already registered.
    """
    if not (isinstance(cls, type) and issubclass(cls, Outcome)):
        raise ConfigError(f"{cls!r} is not an Outcome subclass")
    if cls.kind in OUTCOMES:
        raise ConfigError(f"outcome kind {cls.kind!r} is already registered ({OUTCOMES[cls.kind]})")
    OUTCOMES[cls.kind] = cls
    return cls


BINARY = Binary()
QUANTITATIVE = Quantitative()


def outcome(kind: str | Outcome | None) -> Outcome:
    """The outcome of kind ``kind`` (an :class:`Outcome` is returned as is; None: binary).

    Raises
    ------
    ConfigError
        Naming the kind and the kinds there are.
    """
    if isinstance(kind, Outcome):
        return kind
    if kind is None:
        return BINARY
    if kind not in OUTCOMES:
        raise ConfigError(f"outcome kind {kind!r} unknown; choose from {sorted(OUTCOMES)}")
    return OUTCOMES[kind]()
