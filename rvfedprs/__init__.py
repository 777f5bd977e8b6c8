"""rvfedprs: federated polygenic risk scores that keep rare-variant signals alive.

Module docstrings cite the design decisions as "design §N": docs/ARCHITECTURE.md, section 10.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
