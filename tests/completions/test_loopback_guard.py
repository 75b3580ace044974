"""The tests' network guard (tests/loopback_guard.py): loopback connects, anything else is refused
before a packet leaves (the gsm8k and serve-bench tests and their background children use it)."""

import socket

import loopback_guard
import pytest


def test_loopback_passes_and_any_other_address_is_refused(monkeypatch):
    monkeypatch.setattr(socket.socket, "connect", loopback_guard.guard(socket.socket.connect))
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with socket.socket() as c:
            c.connect(srv.getsockname())  # loopback: connects
    with socket.socket() as c, pytest.raises(OSError, match="test network guard: connection to .*refused"):
        c.connect(("192.0.2.1", 80))  # TEST-NET-1: refused by the guard, nothing sent
