"""Engines that run a strategy over a federation; the client function they all share."""

from __future__ import annotations

__all__ = ["ENGINES"]

#: Engine names accepted by ``rvfedprs train --engine``.
ENGINES: tuple[str, ...] = ("inprocess", "flower-sim", "flower-deploy")
