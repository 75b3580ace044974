"""The tests' network guard: socket connections to anything but loopback are refused.

Used by ``tests/conftest.py``'s ``loopback_only`` fixture (monkeypatched for one test) and by the
background child programs that run gates against loopback servers (installed for the process).
"""

import socket

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def guard(real_connect):
    """``socket.socket.connect`` that refuses every INET address but loopback."""

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in LOOPBACK:
            raise OSError(f"test network guard: connection to {address!r} refused")
        return real_connect(self, address)

    return guarded


def install() -> None:
    socket.socket.connect = guard(socket.socket.connect)
