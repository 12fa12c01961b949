"""Binding a service's listening sockets before it starts (the gateway, the receiver).

A service binds its port first, then opens its database or writes files: a port that is
taken (another instance running) stops the command with one line and nothing touched.
The sockets are bound as aiohttp would bind them and handed to ``web.run_app(sock=...)``.
"""

from __future__ import annotations

import errno
import os
import socket


class CannotListen(Exception):
    """The address cannot be bound; the message (one line) says which and what to do."""


def bind_sockets(
    host: str, port: int, *, port_setting: str, reuse_port: bool = False
) -> list[socket.socket]:
    """Sockets bound to ``host``:``port``, one per address the host resolves to (an empty
    host: every interface), not listening yet: SO_REUSEADDR on POSIX (as asyncio),
    IPv6-only IPv6 sockets, SO_REUSEPORT when ``reuse_port`` (workers sharing the port).
    With port 0, every address gets the one free port the first was given.

    ``port_setting`` names where the port is set, for the message (e.g. "--port (or
    port, A2A_GATEWAY_PORT)"). Raises :class:`CannotListen`."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise CannotListen(
            f"cannot listen on {shown}: the host does not resolve ({exc.strerror}); check --host"
        ) from None
    bound: list[socket.socket] = []
    chosen: int | None = None  # with port 0: the free port the first address got
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if chosen is not None:
                address = (address[0], chosen, *address[2:])  # every address, one port
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:
                continue  # an address family this machine lacks (e.g. no IPv6)
            bound.append(sock)
            if os.name == "posix":  # as asyncio: elsewhere it means another thing
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise CannotListen(f"cannot listen on {shown}: {_why(exc, port_setting)}") from None
            if port == 0 and chosen is None:
                chosen = sock.getsockname()[1]
        if not bound:
            raise CannotListen(f"cannot listen on {shown}: no usable address; check --host")
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def _why(exc: OSError, port_setting: str) -> str:
    """Why a bind failed, and what to do about it."""
    if exc.errno == errno.EADDRINUSE:
        return (
            "address already in use (another process has that port); pick "
            f"another {port_setting}, or stop the process using it"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return "the address is not one of this machine's; check --host"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); pick another --port"
    return (exc.strerror or str(exc)).lower()
