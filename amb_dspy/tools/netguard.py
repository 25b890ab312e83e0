"""Where ``visit`` may connect, and for how long: the guard against server-side request forgery.

A URL an LM hands to ``visit`` may point anywhere, including at this machine (``127.0.0.1``,
``localhost``, ``[::ffff:127.0.0.1]``, ``2130706433``, ``0x7f000001``), the local network or a cloud
metadata service (``169.254.169.254``). So, unless :attr:`AmbConfig.allow_private_urls` is set
(``AMB_ALLOW_PRIVATE_URLS=1``):

* :func:`check_url` refuses a URL before any request: schemes other than http(s), credentials
  (``user@host``) and hosts whose name resolves, by ``socket.getaddrinfo`` (which also reads the
  decimal, hex and octal IPv4 forms), to any address that is not public: loopback, private,
  link-local, multicast, reserved, unspecified, shared (CGNAT), including IPv4 addresses inside
  IPv6 ones (``::ffff:a.b.c.d``, 6to4, NAT64). The caller checks every redirect hop the same way.
* Inside a :class:`FetchGuard`, a direct connection goes to the addresses :func:`check_url` checked
  for its host (looked up once, so a name cannot resolve to a public address for the check and to a
  private one a moment later: DNS rebinding), and :class:`GuardedAdapter` checks the address each new
  connection reached, before a byte is sent.
* Through an HTTP(S) proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``: requests reads them) the
  connection's peer is the proxy, which the user chose, so only :func:`check_url`, run on the target
  before every request and redirect hop, decides; the proxy then resolves the name itself.

:class:`FetchGuard` also holds one download's wall-clock deadline, name lookups included: they run in
a worker thread for at most the time left (:class:`ResolutionTimeout` after that; the lookup itself
cannot be interrupted and ends in the background). When the deadline passes, the sockets of the
download are shut down, which wakes any read blocked on them, so a server that drips one byte at a
time (into the headers or the body) cannot hold a visit past its timeout.
"""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import threading
import time
from urllib.parse import quote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, ProxyManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import NameResolutionError, NewConnectionError

from amb_dspy.errors import AmbError

_ALLOW_HINT = "set AMB_ALLOW_PRIVATE_URLS=1 to allow it"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class URLRefused(AmbError, ValueError):
    """A URL or address ``visit`` must not fetch; the message is one line saying why."""


class ResolutionTimeout(AmbError, TimeoutError):
    """A name lookup did not finish before the download's deadline."""


def shown(url: str, limit: int = 200) -> str:
    """``url`` safe to put in a one-line message: control characters and spaces escaped, length capped."""
    text = "".join(c if c.isprintable() and not c.isspace() else quote(c) for c in str(url))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4 or NAT64), if any."""
    if ip.version != 6:
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def non_public_kind(ip: IPAddress) -> str | None:
    """What kind of non-public address ``ip`` is ("loopback", "private"...), or None for a public one."""
    ip = _embedded_ipv4(ip) or ip
    for kind in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    if not ip.is_global:  # e.g. 100.64.0.0/10, shared address space of carrier-grade NAT
        return "non-global"
    return None


def check_address(address: str, *, allow_private: bool, what: str) -> None:
    """Raise :class:`URLRefused` if ``address`` (an IP address) is not public, unless private ones are allowed."""
    if allow_private:
        return
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id ("fe80::1%eth0")
    except ValueError:
        raise URLRefused(f"{what}: {shown(address)} is not an IP address") from None
    kind = non_public_kind(ip)
    if kind:
        raise URLRefused(f"{what} resolves to {ip} ({kind} address); visit reads public web pages only ({_ALLOW_HINT})")


def check_url(url: str, *, allow_private: bool) -> None:
    """Raise :class:`URLRefused` (one line) if ``visit`` must not fetch ``url``; see the module docs."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a bad port or IPv6 literal
        raise URLRefused(f"cannot visit {shown(url)}: malformed URL ({_one_line(exc)})") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise URLRefused(f"cannot visit {shown(url)}: only http(s) URLs with a host can be visited")
    if "@" in parts.netloc:
        raise URLRefused(f"cannot visit {shown(url)}: URLs with credentials (user@host) are refused")
    if allow_private:
        return
    host, port = parts.hostname, port or (443 if parts.scheme.lower() == "https" else 80)
    try:
        addresses = lookup(host, port)
    except ResolutionTimeout:
        raise
    except (OSError, UnicodeError) as exc:
        reason = f"cannot resolve host {shown(host, 100)} ({_one_line(exc)})"
        raise URLRefused(f"cannot visit {shown(url)}: {reason}") from None
    for address in addresses:
        check_address(address, allow_private=False, what=f"{shown(url)}: host {shown(host, 100)}")
    guard = _ACTIVE.get()
    if guard is not None:
        guard.pin(host, port, addresses)  # a direct connection to this host goes to these addresses


def lookup(host: str, port: int) -> list[str]:
    """:func:`resolve`, within the active :class:`FetchGuard`'s deadline if there is one."""
    guard = _ACTIVE.get()
    return resolve(host, port) if guard is None else guard.resolve(host, port)


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, as the connection would look it up (decimal/hex/octal IPv4 included)."""
    return [sockaddr[0] for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:150] or type(exc).__name__


# --- one download: policy and deadline --------------------------------------------------------------

_ACTIVE: contextvars.ContextVar[FetchGuard | None] = contextvars.ContextVar("amb_fetch_guard", default=None)


class FetchGuard:
    """The policy and wall-clock deadline of one download, active inside ``with``.

    Connections made by a :class:`GuardedAdapter` inside the block are checked against
    ``allow_private`` and watched: at the deadline their sockets are shut down and :attr:`expired`
    turns true, so the blocked read fails at once and the caller can report a timeout. Name lookups
    inside the block (:func:`check_url`'s and the connections') end at the deadline too, and a direct
    connection goes to the addresses :func:`check_url` checked for its host.
    """

    def __init__(self, timeout: float, *, allow_private: bool = False):
        self.timeout = timeout
        self.allow_private = allow_private
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._pinned: dict[tuple[str, int], list[str]] = {}
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True
        self._deadline = time.monotonic() + timeout
        self._token: contextvars.Token | None = None

    def __enter__(self) -> FetchGuard:
        self._token = _ACTIVE.set(self)
        self._deadline = time.monotonic() + self.timeout
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()
        _ACTIVE.reset(self._token)
        with self._lock:
            self._sockets.clear()

    def resolve(self, host: str, port: int) -> list[str]:
        """:func:`resolve` in a worker thread, waited for until the deadline (then :class:`ResolutionTimeout`,
        and the guard expires: getaddrinfo cannot be interrupted, so the lookup ends in the background)."""
        outcome: dict[str, object] = {}
        done = threading.Event()

        def work() -> None:
            try:
                outcome["addresses"] = resolve(host, port)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = exc
            finally:
                done.set()

        remaining = self._deadline - time.monotonic()
        if remaining > 0 and not self.expired:
            threading.Thread(target=work, name="amb-fetch-lookup", daemon=True).start()
            done.wait(remaining)
        if not done.is_set():
            self._expire()
            raise ResolutionTimeout(f"looking up {shown(host, 100)} did not finish within {self.timeout:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["addresses"]

    def pin(self, host: str, port: int, addresses: list[str]) -> None:
        """Send direct connections to ``host:port`` to ``addresses`` (the ones :func:`check_url` checked)."""
        with self._lock:
            self._pinned[(host, port)] = list(addresses)

    def addresses(self, host: str, port: int) -> list[str]:
        """Where a direct connection to ``host:port`` goes: the pinned addresses, else a lookup in time."""
        with self._lock:
            pinned = self._pinned.get((host, port))
        return pinned if pinned is not None else self.resolve(host, port)

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down at the deadline (at once if it has passed)."""
        with self._lock:
            if not self.expired:
                self._sockets.append(sock)
                return
        _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for a TLS socket: it wakes a blocked read without tearing
    # down the TLS state under the reading thread's feet.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed, or detached when it was wrapped in TLS
        pass


# --- connections that check where they landed ---------------------------------------------------------


class _GuardedConnectionMixin:
    """Checks and watches the socket of each urllib3 connection.

    ``_new_conn`` is where urllib3 opens the TCP socket (http and https alike): the peer address is
    checked there, before a TLS handshake or a request byte is sent.
    """

    def _new_conn(self) -> socket.socket:
        guard = _ACTIVE.get()
        sock = super()._new_conn() if guard is None else self._connect_in_time(guard)
        try:
            if self.proxy is None:  # through a proxy the peer is the proxy, not the page's host
                check_address(sock.getpeername()[0], allow_private=guard.allow_private if guard else False,
                              what=f"host {shown(self.host, 100)}")
        except BaseException:
            sock.close()
            raise
        if guard is not None:
            guard.watch(sock)
        return sock

    def _connect_in_time(self, guard: FetchGuard) -> socket.socket:
        """Connect to the host's addresses, looked up (or pinned by :func:`check_url`) within the deadline.

        urllib3 connects to ``_dns_host``; it is set to each address in turn for the TCP connection only,
        so TLS and the Host header still name the host.
        """
        host = self._dns_host
        port = self.port or (443 if isinstance(self, HTTPSConnection) else 80)
        try:
            addresses = guard.resolve(host, port) if self.proxy is not None else guard.addresses(host, port)
        except socket.gaierror as exc:  # as urllib3 reports its own failed lookups
            raise NameResolutionError(self.host, self, exc) from exc
        failure: Exception | None = None
        for address in addresses:
            if self.proxy is None:
                check_address(address, allow_private=guard.allow_private, what=f"host {shown(self.host, 100)}")
            self._dns_host = address
            try:
                return super()._new_conn()
            except NewConnectionError as exc:  # refused or unreachable: the next address, as getaddrinfo's order
                failure = exc
            finally:
                self._dns_host = host
        raise failure or NewConnectionError(self, f"no address found for {shown(host, 100)}")

    def getresponse(self):
        guard = _ACTIVE.get()
        if guard is not None and self.sock is not None:  # the TLS socket, or a kept-alive one from before
            guard.watch(self.sock)
        return super().getresponse()


class _GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


_GUARDED_POOLS = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}


class GuardedAdapter(HTTPAdapter):
    """A requests adapter whose connections check their peer address and obey the active :class:`FetchGuard`.

    Outside a :class:`FetchGuard` the connections refuse non-public addresses and have no deadline.
    Mount it on a session for ``http://`` and ``https://`` (see :func:`guarded_session`).
    """

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _GUARDED_POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, ProxyManager):  # an HTTP(S) proxy; SOCKS pools are left as they are
            manager.pool_classes_by_scheme = _GUARDED_POOLS
        return manager


def guarded_session(session: requests.Session | None = None) -> requests.Session:
    """``session`` (a new ``requests.Session`` if None) with :class:`GuardedAdapter` mounted for http(s)."""
    session = session or requests.Session()
    adapter = GuardedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
