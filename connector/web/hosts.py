"""Which host names the server's readable paths (the web UI's pages and `/search`) answer to: this machine's own
(`CONNECTOR_HTTP_HOST`, localhost, 127.0.0.1, ::1) and those of `CONNECTOR_HTTP_ALLOWED_HOSTS`. A web page on
another site that rebinds its DNS name to 127.0.0.1 sends its own name as the Host: it is refused (421), and so
cannot read documents through the visitor's browser. `/health` and `/metrics` answer any host (probes, scrapers)."""

from __future__ import annotations

from starlette.requests import Request

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def name_of(host: str) -> str:
    """`Host` header or configured name → a bare, lower-case name: no port, no brackets, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:9464
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # name:port (a bare IPv6 address has more colons)
        host = host.partition(":")[0]
    return host.rstrip(".")


class AllowedHosts:
    def __init__(self, names) -> None:
        self.any = "*" in names
        self.names = frozenset(name_of(n) for n in (*LOCAL_HOSTS, *names) if n != "*")

    def admit(self, request: Request) -> bool:
        return self.any or name_of(request.headers.get("host", "")) in self.names
