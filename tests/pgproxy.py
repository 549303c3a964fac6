"""A real proxy in front of Postgres (TCP, or a unix socket where the server listens on one), for faults a network
cut cannot make: a proxy's kernel answers the client's keepalives, so what the proxy does with the bytes is all the
client sees.

- `up = False`: every connection cut, new ones refused (a proxy restart, a server gone with a word).
- `hold(...)`: connections kept open with nothing passed on, as a proxy whose upstream died without a word
  (a failover, a host powered off) or that stalls: the existing ones, new ones too, and with `drop` what arrives
  meanwhile is thrown away (as toxiproxy's `timeout` toxic) rather than left waiting in the socket buffers.
  `release()` passes bytes again.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class Proxy:
    def __init__(self, dsn: str, folder: Path, **dsn_changes: str):
        params = conninfo_to_dict(dsn)
        host, port = params.get("host") or "127.0.0.1", params.get("port") or "5432"
        if host.startswith("/"):  # the embedded server listens on a unix socket: so does the proxy
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
        self._drop = False
        self.thread = threading.Thread(target=self._serve, name="pg-proxy")
        self.thread.start()

    def hold(self, existing: bool = True, new: bool = True, drop: bool = False) -> None:
        with self._lock:
            if existing:
                self._held |= set(self.conns)
            self._hold_new, self._drop = new, drop

    def release(self) -> None:
        with self._lock:
            self._held.clear()
            self._hold_new = self._drop = False

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        paused: set[socket.socket] = set()  # held sockets left unread (unregistered: no busy loop on them)
        while not self.stopping:
            with self._lock:
                hold = self._held if not self._drop else set()
            for s in [s for s in peers if s in hold and s not in paused]:
                sel.unregister(s)
                paused.add(s)
            for s in [s for s in paused if s not in hold]:
                paused.discard(s)
                if s in peers:
                    sel.register(s, selectors.EVENT_READ)
            for key, _ in sel.select(0.05):
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
                        if self._hold_new:
                            self._held |= {client, server}
                    continue
                with self._lock:
                    held = sock in self._held
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
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
