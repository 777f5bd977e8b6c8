"""The Flower engines: ServerApp, ClientApp and the launcher of Flower's processes.

The apps run the same strategies and client code as the in-process engine; the launcher starts
Flower's processes for ``rvfedprs train --engine flower-sim|flower-deploy``.

Modules import Flower, so nothing here is imported by ``rvfedprs.federation`` itself.
"""

from __future__ import annotations

__all__ = ["run_flower"]


def run_flower(*args, **kwargs):
    """See :func:`rvfedprs.federation.flower.launch.run_flower`."""
    from rvfedprs.federation.flower.launch import run_flower as _run

    return _run(*args, **kwargs)
