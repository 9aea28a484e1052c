"""Which HTTP calls go through the user's proxy: never those to a server on this machine, as the user's
`http_proxy` would otherwise carry our loopback probes to a proxy that cannot reach them."""

from __future__ import annotations

import ipaddress
import urllib.parse
import urllib.request
from functools import cache

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_local(url: str) -> bool:
    """True for a URL whose host is this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(url: str) -> str | None:
    """The proxy a request to url would go through under the environment's settings (None: direct)."""
    if is_local(url):
        return None
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    if not proxies or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


@cache
def _direct() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def opener(url: str) -> urllib.request.OpenerDirector:
    """A urllib opener for url: direct for loopback, the environment's proxy settings elsewhere."""
    return _direct() if is_local(url) else urllib.request.build_opener()
