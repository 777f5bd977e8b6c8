"""Engines that run a federated task: the server loop, the task seam and the transports.

- :mod:`~rvfedprs.federation.task` — :class:`Task` (what a task implements) and
  :class:`Transport` (what an engine implements);
- :mod:`~rvfedprs.federation.rounds` — the one server loop every engine runs;
- :mod:`~rvfedprs.federation.seeds`, :mod:`~rvfedprs.federation.checkpoints`,
  :mod:`~rvfedprs.federation.result` — seeds, checkpoints and what a run leaves behind;
- :mod:`~rvfedprs.federation.inprocess` — every site in this process;
- :mod:`~rvfedprs.federation.flower` — Flower's simulation engine and a SuperLink/SuperNode
  deployment.

The engines name no task: tasks (:mod:`rvfedprs.tasks`) plug into them.
"""

from __future__ import annotations

__all__ = ["ENGINES"]

#: Engine names accepted by ``--engine`` (``train.engine``, ``imaging.engine``).
ENGINES: tuple[str, ...] = ("inprocess", "flower-sim", "flower-deploy")
