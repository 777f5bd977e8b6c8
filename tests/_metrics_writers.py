"""Which functions write a ``metrics.json``: seen through Python's audit hook on ``open``.

Every run's metrics file has one writer (:func:`rvfedprs.provenance.write_metrics`, issue 38); a
test runs an entry point inside :func:`metrics_writers` and checks the writers it saw.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The project's code (not the tests, not the standard library).
_OURS = (str(REPO / "rvfedprs") + os.sep, str(REPO / "simulations") + os.sep)
_SEEN: list[list[str]] = []  # one list per open metrics_writers() block


def _watch(event: str, args: tuple) -> None:
    if not _SEEN or event != "open":
        return
    path, mode = args[0], args[1]
    if not isinstance(path, (str, os.PathLike)) or Path(path).name != "metrics.json":
        return
    if not isinstance(mode, str) or not set(mode) & set("wax+"):
        return
    frame = sys._getframe(1)
    while frame is not None and not frame.f_code.co_filename.startswith(_OURS):
        frame = frame.f_back
    where = (
        "outside the project"
        if frame is None
        else (f"{Path(frame.f_code.co_filename).relative_to(REPO)}:{frame.f_code.co_name}")
    )
    _SEEN[-1].append(where)


sys.addaudithook(_watch)  # audit hooks cannot be removed; it records only inside a block


@contextlib.contextmanager
def metrics_writers() -> Iterator[list[str]]:
    """The ``file:function`` of every project function that opened a metrics.json to write."""
    seen: list[str] = []
    _SEEN.append(seen)
    try:
        yield seen
    finally:
        _SEEN[:] = [block for block in _SEEN if block is not seen]


#: The one writer.
WRITER = "rvfedprs/provenance.py:write_metrics"
