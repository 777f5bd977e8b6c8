"""How long a SuperLink takes to see that a SuperNode died, per ``flower.node_heartbeat_seconds``.

For each heartbeat setting a SuperLink and ``--kills + 1`` SuperNodes run on 127.0.0.1 with no
job. Once every node is online, the nodes are killed (SIGKILL) one at a time, each at a random
point of its heartbeat cycle (a random pause before it), and the seconds from the kill until the
SuperLink's Control API lists the node ``offline`` are measured (its listing asked about once a
second, so each figure is up to ≈ 1 s late). Until then an exchange that asked the dead node
waits for it (or for ``flower.round_timeout``); after it, the SuperLink answers "Node
Unavailable" at once.

Usage: python benchmarks/bench_lost_node.py [--kills 3] [--heartbeats flower 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import time
from pathlib import Path

from _sweep import sweep

from rvfedprs.federation.flower.identity import list_nodes
from rvfedprs.federation.flower.processes import flower_env
from rvfedprs.federation.flower.superlink import start_local, write_connection


def _statuses(env: dict) -> dict[int, str]:
    return {int(n["node_id"]): n["status"] for n in list_nodes(env)}


def detection_seconds(heartbeat: float | None, kills: int, work: Path, seed: int) -> dict:
    """Seconds from each node's kill until the SuperLink lists it offline."""
    rng = random.Random(seed)
    labels = [f"n{i}" for i in range(kills + 1)]
    configs = {label: {"client-id": label} for label in labels}
    with start_local(
        work / "deploy", simulation=False, nodes=configs, node_heartbeat_seconds=heartbeat
    ) as link:
        write_connection(work / "ctl", link.address)
        env = flower_env(work / "ctl")
        deadline = time.monotonic() + 300
        while sum(s == "online" for s in _statuses(env).values()) < len(labels):
            if time.monotonic() > deadline:
                raise RuntimeError(f"not every node came online within 300 s: {_statuses(env)}")
            time.sleep(0.5)
        pids = link.processes.pids()
        seen: list[float] = []
        for label in labels[:kills]:
            time.sleep(rng.uniform(0, 10))  # somewhere in the node's heartbeat cycle
            online = {i for i, s in _statuses(env).items() if s == "online"}
            os.kill(pids[label], signal.SIGKILL)
            killed = time.monotonic()
            while True:
                now = _statuses(env)
                gone = [i for i in online if now.get(i) == "offline"]
                if gone:
                    seen.append(time.monotonic() - killed)
                    break
                if time.monotonic() - killed > 300:
                    raise RuntimeError(f"{label} not listed offline 300 s after its kill")
                time.sleep(0.5)
    return {
        "node_heartbeat_seconds": heartbeat,
        "seconds_to_offline": [round(s, 1) for s in seen],
        "median": round(statistics.median(seen), 1),
        "load_average": round(os.getloadavg()[0], 1),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument(
        "--heartbeats", nargs="+", default=["flower", "10"],
        help="node_heartbeat_seconds values (flower: null, Flower's own 30 s)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    sweep(
        args.heartbeats,
        lambda heartbeat, work: detection_seconds(heartbeat, args.kills, work, args.seed),
        args.json,
        {"kills": args.kills},
    )


if __name__ == "__main__":
    main()
