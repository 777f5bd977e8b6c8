"""Seeds of a federated run: every random draw derives from the master seed and a path.

The initial model is seeded from ``SeedSequence([seed, 0])`` and client ``c`` trains in round
``t`` with ``SeedSequence([seed, t, crc32(c)])``, so a result depends neither on the order of
clients, nor on the engine, nor on a resume in between.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["SEED_SCHEME", "derive_seed", "client_seed", "initial_seed"]

#: How per-(round, client) seeds are derived (recorded in every checkpoint).
SEED_SCHEME = "SeedSequence([seed, round, crc32(client_id)])"


def derive_seed(master_seed: int, *words: int | str) -> int:
    """A 31-bit seed from the master seed and a path of ints/strings (strings via CRC-32)."""
    entropy = [int(master_seed)] + [
        zlib.crc32(w.encode()) if isinstance(w, str) else int(w) for w in words
    ]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)


def client_seed(random_seed: int, server_round: int, client_id: str) -> int:
    """The seed of ``client_id`` in ``server_round`` (independent of client order and resume)."""
    return derive_seed(random_seed, server_round, client_id)


def initial_seed(random_seed: int) -> int:
    """The seed of the initial model w^0."""
    return derive_seed(random_seed, 0)
