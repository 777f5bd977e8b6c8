"""Ports for the local Flower/Ray processes: chosen together, never repeated."""

import socket

from rvfedprs.federation.flower.processes import free_ports


def test_ports_chosen_together_are_distinct_and_bindable():
    # one at a time a closed socket's port can be handed out again: two Ray components given
    # one port abort Ray's start (seen in CI); chosen together they cannot repeat
    for _ in range(100):
        ports = free_ports(6)
        assert len(set(ports)) == 6
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in ports]
    try:
        for s, port in zip(sockets, ports, strict=True):
            s.bind(("127.0.0.1", port))  # free after the call returned
    finally:
        for s in sockets:
            s.close()
    assert free_ports(0) == []
