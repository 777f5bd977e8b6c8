"""Range-checked number types for the commands' options.

For the commands (``rvfedprs.commands``): ``type=bounded(float, 0, 1)`` makes argparse refuse
``--min-overlap 2`` with ``argument --min-overlap: 2 is not in [0, 1]`` (exit code 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["bounded", "SEED", "COUNT", "ROUNDS", "FRACTION", "DefaultsHelpFormatter"]


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's ``(default: X)`` after an option's help, unless that says its default.

    Nothing is added either where there is no default to say (None, a flag's False).
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def bounded(
    kind: type[int] | type[float],
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> Callable[[str], int | float]:
    """An argparse ``type`` that parses ``kind`` and refuses values outside the range.

    Parameters
    ----------
    kind : int or float
    low, high : float, optional
        The bounds (None: unbounded on that side).
    low_open, high_open : bool
        Whether the bound itself is refused.
    """
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    lowest = "-inf" if low is None else f"{low:g}"
    highest = "inf" if high is None else f"{high:g}"
    span = f"{left}{lowest}, {highest}{right}"
    what = "an integer" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if kind is float and value != value:  # NaN
            raise argparse.ArgumentTypeError(f"{text!r} is not a number in {span}")
        too_low = low is not None and (value <= low if low_open else value < low)
        too_high = high is not None and (value >= high if high_open else value > high)
        if too_low or too_high:
            raise argparse.ArgumentTypeError(f"{text} is not in {span}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


#: A random seed: an integer ≥ 0 (numpy's SeedSequence refuses negatives).
SEED = bounded(int, 0)
#: A count of at least one (rounds, cores, chunk sizes, PCs).
COUNT = bounded(int, 1)
#: Rounds: an integer ≥ 0 (0 is refused by the configuration's own check, naming it).
ROUNDS = bounded(int, 0)
#: A fraction in [0, 1].
FRACTION = bounded(float, 0, 1)
