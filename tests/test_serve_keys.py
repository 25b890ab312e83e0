"""`amb serve --http` with keys, driven by the mcp SDK's own streamable-HTTP client: no key or a wrong one is
401, a key reaches its own namespaces and tasks only, a revoked key is refused at once, a server on every
address refuses to start without a key, and a forged Host header is refused.

Each server is the real `amb serve --http` in a subprocess (heuristic policy: no LM words at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from local_servers import free_port, stop, wait_listening
from test_keys import amb
from test_serve import SERVE, _env, call, ok

pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}


def new_key(tmp_path: Path, *namespaces: str) -> tuple[str, str]:
    """A key made by `amb keys create` for ``namespaces``: (its id, the key)."""
    made = amb(tmp_path, "keys", "create", *[a for n in namespaces for a in ("--namespace", n)])
    assert made.returncode == 0, made.stderr
    return made.stderr.split()[1], made.stdout.strip()


@contextlib.contextmanager
def http_server(tmp_path: Path, *flags: str):
    """`amb serve --http PORT` with ``flags`` (e.g. --host 0.0.0.0); its URL on 127.0.0.1."""
    port = free_port()
    process = subprocess.Popen([sys.executable, *SERVE, "--http", str(port), *flags], env=_env(tmp_path),
                               cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, process, 120, what="amb serve --http", pause=0.2,
                       output=lambda: process.stderr.read().decode() if process.poll() is not None else "")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process, timeout=30)


def status(url: str, key: str | None = None, host: str | None = None, origin: str | None = None) -> int:
    """The HTTP status of an MCP initialize request (a plain POST) with ``key`` and ``host``/``origin`` headers."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               **({"Authorization": f"Bearer {key}"} if key else {}), **({"Host": host} if host else {}),
               **({"Origin": origin} if origin else {})}
    request = urllib.request.Request(url, data=json.dumps(INITIALIZE).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@contextlib.asynccontextmanager
async def client(url: str, key: str):
    """The SDK's client session on ``url``, every request carrying ``key``."""
    async with (create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session):
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    """One server on 127.0.0.1 with three keys: alice's, bob's (bob and team), and one to revoke."""
    tmp_path = tmp_path_factory.mktemp("keyed")
    keys = {"alice": new_key(tmp_path, "alice"), "bob": new_key(tmp_path, "bob", "team"),
            "gone": new_key(tmp_path, "gone")}
    with http_server(tmp_path) as url:
        yield {"url": url, "tmp_path": tmp_path, "keys": keys}


def test_no_key_or_a_wrong_one_is_401(keyed):
    url, (_, alice) = keyed["url"], keyed["keys"]["alice"]
    assert status(url) == 401
    assert status(url, "amb_" + "x" * 43) == 401
    assert status(url, alice[:-1]) == 401
    assert status(url, alice) == 200


def test_a_key_reaches_its_own_namespaces_only(keyed):
    url, (_, alice), (_, bob) = keyed["url"], keyed["keys"]["alice"], keyed["keys"]["bob"]

    async def scenario():
        async with client(url, alice) as mine, client(url, bob) as theirs:
            pin = await ok(mine, "memory_write", text="Alice's bank card PIN is 4921.")  # her first namespace
            assert (await ok(mine, "memory_search", query="PIN", namespace="alice"))["items"][0]["item_id"] == pin["item_id"]
            for tool, arguments in [("memory_search", {"query": "PIN", "namespace": "alice"}),
                                    ("memory_update", {"item_id": pin["item_id"], "text": "PIN 0000", "namespace": "alice"}),
                                    ("memory_delete", {"item_id": pin["item_id"], "namespace": "alice"}),
                                    ("memory_write", {"text": "PIN 1111", "namespace": "alice"}),
                                    ("memory_start_task", {"goal": "g", "namespace": "alice"})]:
                text, error = await call(theirs, tool, **arguments)
                assert error and text.endswith(": namespace 'alice': this key reaches bob, team only"), (tool, text)
            assert await ok(theirs, "memory_search", query="PIN") == {"items": []}  # bob's own namespace: none of hers
            text, error = await call(theirs, "memory_update", item_id=pin["item_id"], text="PIN 0000")
            assert error and "4921" not in text
            assert await ok(theirs, "memory_write", text="Team standup is at 9:30.", namespace="team")
            found = await ok(mine, "memory_search", query="PIN", namespace="alice")
            assert [f["text"] for f in found["items"]] == ["Alice's bank card PIN is 4921."]
            text, error = await call(mine, "memory_search", query="standup", namespace="team")
            assert error and "this key reaches alice only" in text

    asyncio.run(scenario())


def test_another_key_s_task_is_no_open_task(keyed):
    url, (_, alice), (_, bob) = keyed["url"], keyed["keys"]["alice"], keyed["keys"]["bob"]

    async def scenario():
        async with client(url, alice) as mine, client(url, bob) as theirs:
            task_id = (await ok(mine, "memory_start_task", goal="Where is the spare key kept?"))["task_id"]
            await ok(mine, "memory_observe", task_id=task_id, tool="search", wait=True,
                     result="The spare key is under the blue flowerpot by the back door.")
            for tool, arguments in [("memory_context", {}), ("memory_export", {}), ("memory_plan", {}),
                                    ("memory_observe", {"tool": "search", "result": "a forged clue"}),
                                    ("memory_complete", {"answer": "nowhere"}), ("memory_end_task", {})]:
                text, error = await call(theirs, tool, task_id=task_id, **arguments)
                assert error and text.endswith(f": no open task {task_id!r}: start one with memory_start_task"), (tool, text)
            context = await ok(mine, "memory_context", task_id=task_id)
            assert "blue flowerpot" in context and "forged" not in context
            exported = await ok(mine, "memory_export", task_id=task_id)
            text, error = await call(theirs, "memory_start_task", goal="g", bank=exported["path"])
            assert error and "not shared between keys" in text
            await ok(mine, "memory_end_task", task_id=task_id)

    asyncio.run(scenario())


def test_a_revoked_key_is_refused_by_the_running_server(keyed):
    url, (key_id, gone) = keyed["url"], keyed["keys"]["gone"]
    assert status(url, gone) == 200
    assert amb(keyed["tmp_path"], "keys", "revoke", key_id).returncode == 0
    assert status(url, gone) == 401


def test_every_address_without_a_key_refuses_to_start_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, *SERVE, "--http", str(free_port()), "--host", "0.0.0.0"],
                          env=_env(tmp_path), cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: amb serve --http on 0.0.0.0 needs a key, and there is none: make "
                                        "one with amb keys create --namespace NS (or listen on 127.0.0.1)"]


def test_a_forged_host_is_refused_on_every_address(tmp_path):
    _, key = new_key(tmp_path, "alice")
    with http_server(tmp_path, "--host", "0.0.0.0", "--allow-host", "memory.example.org") as url:
        port = url.split(":")[2].split("/")[0]
        assert status(url, key) == 200
        assert status(url, key, host=f"memory.example.org:{port}") == 200
        assert status(url, key, host=f"attacker.example:{port}") == 421
        assert status(url, key, host="attacker.example") == 421
        assert status(url, key, origin="http://attacker.example") == 403
        assert status(url, key, origin=f"https://memory.example.org:{port}") == 200
        assert status(url, host=f"memory.example.org:{port}") == 401
