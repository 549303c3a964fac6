"""A real proxy in front of Postgres (TCP, or a unix socket where the server listens on one), for faults a network
cut cannot make: a proxy's kernel answers the client's keepalives, so what the proxy does with the bytes is all the
client sees.

- `up = False`: every connection cut, new ones refused (a proxy restart, a server gone with a word).
- `hold(...)`: connections kept open with nothing passed on, as a proxy whose upstream died without a word
  (a failover, a host powered off) or that stalls: the existing ones, new ones too, and with `drop` what arrives
  meanwhile is thrown away (as toxiproxy's `timeout` toxic) rather than left waiting in the socket buffers.
  `release()` passes bytes again. `direction="up"` holds only what the client sends (its queries, its COPY data),
  `"down"` only what the server sends (its answers).
- `throttle(up=..., down=...)`: bytes a second passed on in each direction (a slow link), for every connection.
- `hold_at(pattern, direction, before)`: once, the first connection whose client sends `pattern` (b"COPY", b"COMMIT")
  is held in `direction`, from the chunk after it or, with `before`, from the chunk that holds it (kept, passed on
  at `release()`): a stall that starts in the middle of a batch's COPY, or at its COMMIT.
- `tcp=True`: the proxy listens on TCP even where the server listens on a unix socket (the client's side is then a
  TCP connection, with its kernel's buffers and keepalives).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class Proxy:
    def __init__(self, dsn: str, folder: Path, tcp: bool = False, **dsn_changes: str):
        params = conninfo_to_dict(dsn)
        host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
        if host.startswith("/") and tcp:
            self.target = f"{host}/.s.PGSQL.{port}"
            self.listener = socket.create_server(("127.0.0.1", 0))
            self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(self.listener.getsockname()[1]), **dsn_changes)
        elif host.startswith("/"):  # the embedded server listens on a unix socket: so does the proxy
            self.target: tuple | str = f"{host}/.s.PGSQL.{port}"
            self.listener = socket.socket(socket.AF_UNIX)
            self.listener.bind(str(folder / f".s.PGSQL.{port}"))
            self.listener.listen()
            self.dsn = make_conninfo(dsn, host=str(folder), port=port, **dsn_changes)
        else:
            self.target = (host, int(port))
            self.listener = socket.create_server(("127.0.0.1", 0))
            self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(self.listener.getsockname()[1]), **dsn_changes)
        self.up = True
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self.stopping = False
        self._lock = threading.Lock()
        self._held: set[socket.socket] = set()  # sockets whose bytes are not passed on
        self._hold_new = False
        self._direction = "both"
        self._drop = False
        self._clients: set[socket.socket] = set()  # what is read from these goes up (client to server)
        self._rates: dict[str, float | None] = {"up": None, "down": None}
        self._armed: tuple[bytes, str, bool] | None = None
        self.triggered = threading.Event()
        self._kept: dict[socket.socket, bytes] = {}  # a held chunk to pass on at release
        self.thread = threading.Thread(target=self._serve, name="pg-proxy")
        self.thread.start()

    def hold(self, existing: bool = True, new: bool = True, drop: bool = False, direction: str = "both") -> None:
        with self._lock:
            self._direction = direction
            if existing:
                self._held |= {s for s in self.conns if self._goes(s, direction)}
            self._hold_new, self._drop = new, drop

    def _goes(self, sock: socket.socket, direction: str) -> bool:
        """Whether what is read from `sock` goes `direction` ("both", "up": client to server, "down")."""
        return direction == "both" or (sock in self._clients) == (direction == "up")

    def release(self) -> None:
        with self._lock:
            for sock, data in self._kept.items():
                with contextlib.suppress(OSError):
                    sock.sendall(data)
            self._kept.clear()
            self._held.clear()
            self._hold_new = self._drop = False

    def hold_at(self, pattern: bytes, direction: str = "both", before: bool = False) -> None:
        with self._lock:
            self._armed = (pattern, direction, before)
            self.triggered = threading.Event()

    def throttle(self, up: float | None = None, down: float | None = None) -> None:
        with self._lock:
            self._rates = {"up": up, "down": down}

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        paused: set[socket.socket] = set()  # held sockets left unread (unregistered: no busy loop on them)
        resume_at: dict[socket.socket, float] = {}  # throttled sockets: not read again before then
        while not self.stopping:
            now = time.monotonic()
            with self._lock:
                hold = (self._held if not self._drop else set()) | {s for s, t in resume_at.items() if t > now}
            for s in [s for s, t in resume_at.items() if t <= now]:
                del resume_at[s]
            for s in [s for s in peers if s in hold and s not in paused]:
                sel.unregister(s)
                paused.add(s)
            for s in [s for s in paused if s not in hold]:
                paused.discard(s)
                if s in peers:
                    sel.register(s, selectors.EVENT_READ)
            for key, _ in sel.select(0.01 if resume_at else 0.05):
                sock = key.fileobj
                if sock is self.listener:
                    client, _addr = self.listener.accept()
                    self.accepted += 1
                    if not self.up:
                        client.close()
                        continue
                    if isinstance(self.target, str):
                        server = socket.socket(socket.AF_UNIX)
                        server.connect(self.target)
                    else:
                        server = socket.create_connection(self.target)
                    peers[client], peers[server] = server, client
                    for s in (client, server):
                        sel.register(s, selectors.EVENT_READ)
                    with self._lock:
                        self.conns += [client, server]
                        self._clients.add(client)
                        if self._hold_new:
                            self._held |= {s for s in (client, server) if self._goes(s, self._direction)}
                    continue
                with self._lock:
                    held = sock in self._held
                    rate = self._rates["up" if sock in self._clients else "down"]
                try:
                    data = sock.recv(65536 if rate is None else max(1, int(rate * 0.01)))
                except OSError:
                    data = b""
                if data and rate is not None:
                    resume_at[sock] = time.monotonic() + len(data) / rate
                kept = False
                with self._lock:
                    armed = self._armed
                    if data and armed and sock in self._clients and armed[0] in data:
                        self._armed = None
                        self._held |= {s for s in (sock, peers[sock]) if self._goes(s, armed[1])}
                        if armed[2]:
                            self._kept[peers[sock]] = data
                            kept = True
                        self.triggered.set()
                if kept:
                    continue
                if data and held:
                    continue  # thrown away
                if data and self.up:
                    with contextlib.suppress(OSError):
                        peers[sock].sendall(data)
                    continue
                for s in (sock, peers.get(sock)):
                    if s is not None and s in peers:
                        if s in paused:
                            paused.discard(s)
                        else:
                            sel.unregister(s)
                        s.close()
                        peers.pop(s)
            if not self.up:
                for s in list(peers):
                    if s not in paused:
                        sel.unregister(s)
                    s.close()
                peers.clear()
                paused.clear()
        for s in peers:
            s.close()
        sel.close()

    def stop(self) -> None:
        self.stopping = True
        self.thread.join()
        self.listener.close()
