"""Shared by the Flower-setting benchmarks: measure once per setting value, print, write JSON."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


def sweep(
    values: Sequence[str],
    measure: Callable[[float | None, Path], dict],
    json_path: Path | None,
    header: dict,
) -> list[dict]:
    """``measure(value, folder)`` for each of ``values``, each in a fresh temporary folder.

    ``"flower"`` stands for None (Flower's own setting), any other value is read as a float.
    Each row is printed as one JSON line as it comes; with ``json_path`` the rows are also
    written there under ``runs``, after ``header``.
    """
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(values):
            row = measure(None if text == "flower" else float(text), Path(tmp) / str(i))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({**header, "runs": rows}, indent=2) + "\n")
    return rows
