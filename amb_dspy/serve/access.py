"""Who may reach ``amb serve --http``, and what: the Host/Origin allow list, keys checked with the mcp SDK's own
bearer-token hooks, and the caller's tools held to its key's namespaces and tasks.

* **Addresses.** On loopback a server without keys serves anyone on this machine, as before; on any other
  address it refuses to start without a key (:func:`check_keys_for`).
* **Host/Origin.** Every HTTP server checks the ``Host`` and ``Origin`` headers (DNS rebinding): loopback names,
  the address it listens on, and each ``--allow-host`` (:func:`transport_security`).
* **Keys.** With keys, every call carries ``Authorization: Bearer KEY``: the SDK's ``RequireAuthMiddleware``
  answers 401 to a missing or unknown key, :class:`KeyVerifier` (its ``TokenVerifier``) looks a key up in the
  :class:`~amb_dspy.serve.keys.KeyStore` on every request, so a revoked key fails at once. A tool sees its
  caller through the SDK's ``get_access_token`` (:func:`caller`).
* **Reach.** A key's calls work in its namespaces only (an omitted namespace is its first: the operator's
  choice, and a client that never names one keeps working) and on the tasks it started; another key's task
  is "no open task", as if it did not exist (:class:`KeyedHost`, the registry's ``owner``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

from amb_dspy.errors import InputError
from amb_dspy.serve.keys import KeyStore
from amb_dspy.storage.bank_names import BANKS_FOLDER
from amb_dspy.task.tools import ToolHost

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
NAMESPACES_CLAIM = "namespaces"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve to anything


def check_keys_for(host: str, store: KeyStore) -> bool:
    """Whether the server on ``host`` asks for keys (it does whenever the store holds one); InputError when
    ``host`` is not loopback and there is no key."""
    if store.list():
        return True
    if not is_loopback(host):
        raise InputError(f"amb serve --http on {host} needs a key, and there is none: make one with "
                         "amb keys create --namespace NS (or listen on 127.0.0.1)")
    return False


def allowed_hosts(host: str, allow_hosts: list[str]) -> list[str]:
    """The Host header values (no port) the server answers to: loopback names, ``host`` itself unless it is
    every address (0.0.0.0, ::), and ``allow_hosts``."""
    names = [*LOOPBACK_NAMES]
    try:
        unspecified = ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        unspecified = False
    if not unspecified:
        names.append(f"[{host.strip('[]')}]" if ":" in host else host)
    for name in allow_hosts:
        if not name or any(c in name for c in "/@ \t") or name.endswith(":*"):
            raise InputError(f"--allow-host {name!r}: give a host name or address, optionally with :PORT")
        names.append(name)
    return list(dict.fromkeys(names))


def transport_security(host: str, allow_hosts: list[str]) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding check, on for every address: a Host header must be one of
    :func:`allowed_hosts` (with any port, unless the entry names one), an Origin the same over http or https."""
    names = allowed_hosts(host, allow_hosts)
    hosts = [pattern for name in names for pattern in ([name] if _has_port(name) else [name, f"{name}:*"])]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")])


def _has_port(name: str) -> bool:
    return name.rsplit("]", 1)[-1].count(":") == 1 if name.startswith("[") else name.count(":") == 1


def auth_settings() -> AuthSettings:
    """The SDK's auth settings for keys: a resource server only (no OAuth routes; the issuer is never
    served or checked, the keys being ours)."""
    return AuthSettings(issuer_url="http://127.0.0.1", resource_server_url=None)


class KeyVerifier:
    """The SDK's ``TokenVerifier`` over a :class:`KeyStore`: a key it holds becomes an ``AccessToken`` whose
    ``client_id`` is the key's id and whose claims name its namespaces."""

    def __init__(self, store: KeyStore):
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        key = await anyio.to_thread.run_sync(self.store.verify, token)
        if key is None:
            return None
        return AccessToken(token="", client_id=key.key_id, scopes=[],
                           claims={NAMESPACES_CLAIM: list(key.namespaces)})


@dataclass(frozen=True)
class Caller:
    """The key a request came with: its id (the owner of the tasks it starts) and its namespaces."""

    key_id: str
    namespaces: tuple[str, ...]


def caller() -> Caller | None:
    """The current request's key (set by the SDK's auth middleware); None without keys (stdio, loopback)."""
    token = get_access_token()
    if token is None:
        return None
    return Caller(token.client_id, tuple((token.claims or {}).get(NAMESPACES_CLAIM, ())))


def reached_namespace(namespaces: tuple[str, ...], namespace: str | None) -> str:
    """The namespace a key's call works in: ``namespace`` if the key names it (InputError if not), else the
    key's first."""
    if namespace is None:
        return namespaces[0]
    if namespace not in namespaces:
        raise InputError(f"namespace {namespace!r}: this key reaches {', '.join(namespaces)} only")
    return namespace


@dataclass(frozen=True)
class KeyedHost(ToolHost):
    """The tools outside a task, for one key: its namespaces only, and bank files from the shared ``banks/``
    folder or an operator's ``--allow-dir`` only: the rest of the storage folder holds other keys' tasks
    (``tasks/``) and exports (``sessions/``)."""

    namespaces: tuple[str, ...] = ()

    def namespace(self, namespace: str | None) -> str:
        return reached_namespace(self.namespaces, namespace)

    def bank_file(self, bank: str | None):
        path = super().bank_file(bank)  # a bank in the database: a named bank, never a task's (task/ID)
        shared = [(self.config.paths.storage_dir.expanduser() / BANKS_FOLDER).resolve(),
                  *(Path(d).expanduser().resolve() for d in self.allowed_dirs)]
        if isinstance(path, Path) and not any(path.is_relative_to(folder) for folder in shared):
            raise InputError(f"bank file {bank}: tasks and their exports are not shared between keys; start from a "
                             "bank in the storage folder's banks/ or a folder the operator allows")
        return path
