"""What an idle loopback deployment's polling costs: CPU seconds per SuperNode poll setting.

For each ``flower.node_poll_seconds`` value a SuperLink and ``--nodes`` SuperNodes (warm
ClientApps, as ``flower-deploy`` starts them) run on 127.0.0.1 with no job; once every node has
connected and every warm executor has loaded its modules, the CPU seconds (user + system) of
each process over ``--seconds`` idle seconds are read with psutil, summed by role: the
SuperLink, the SuperNodes (whose asks for messages the setting paces), the warm executors
(which ask their node for tasks every 0.5 s at most, whatever the setting).

Usage: python benchmarks/bench_node_poll_idle.py [--nodes 5] [--seconds 30]
       [--polls flower 1 0.5 0.25 0.1] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import psutil
from _sweep import sweep

from rvfedprs.federation.flower.superlink import start_local


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it has gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system


def _role(label: str) -> str:
    if label == "superlink":
        return "superlink"
    return "executors" if label.endswith("-clientapp") else "supernodes"


def idle_cpu(poll: float | None, nodes: int, seconds: float, work: Path) -> dict:
    """CPU seconds by role over ``seconds`` idle seconds of a deployment polling every ``poll``."""
    configs = {f"c{i}": {"client-id": f"c{i}"} for i in range(nodes)}
    with start_local(
        work, simulation=False, nodes=configs, clientapp="warm", node_poll_seconds=poll
    ) as link:
        logs = link.processes.logs
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            activated = (logs / "superlink.log").read_text().count("Activated node_id=")
            serving = sum(
                "executor serving" in (logs / f"{label}-clientapp.log").read_text()
                for label in configs
            )
            if activated >= nodes and serving >= nodes:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the deployment did not start within 300 s; see {logs}")
        time.sleep(5)  # the last imports' tail
        pids = link.processes.pids()
        before = {label: _cpu(pid) for label, pid in pids.items()}
        start = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        used = {label: _cpu(pid) - before[label] for label, pid in pids.items()}
    by_role: dict[str, float] = {}
    for label, cpu in used.items():
        by_role[_role(label)] = by_role.get(_role(label), 0.0) + cpu
    return {
        "node_poll_seconds": poll,
        "idle_seconds": round(elapsed, 1),
        "load_average": round(os.getloadavg()[0], 1),
        "cpu_s": {role: round(cpu, 2) for role, cpu in sorted(by_role.items())},
        "cpu_s_total": round(sum(by_role.values()), 2),
        "cores_used": round(sum(by_role.values()) / elapsed, 3),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--polls", nargs="+", default=["flower", "1", "0.5", "0.25", "0.1"],
        help="node_poll_seconds values (flower: null, Flower's own 3 s)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    sweep(
        args.polls,
        lambda poll, work: idle_cpu(poll, args.nodes, args.seconds, work),
        args.json,
        {"nodes": args.nodes},
    )


if __name__ == "__main__":
    main()
