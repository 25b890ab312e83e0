"""What ``amb serve`` does once its flags are parsed (the CLI registers :func:`serve_command`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

# Where each MCP client reads the JSON that --print-config writes (Claude Desktop: macOS, Windows).
CLIENT_CONFIG_FILES = {
    "claude": "~/Library/Application Support/Claude/claude_desktop_config.json or %APPDATA%\\Claude\\claude_desktop_config.json",
    "cursor": "~/.cursor/mcp.json (every project) or .cursor/mcp.json (this project)",
}

# The --embedder flag of amb run, ingest, eval and serve (amb_dspy.config.embedder_spec).
EMBEDDER_HELP = ("the embedder (AMB_EMBEDDER): local (the bundled all-MiniLM-L6-v2, default), a folder holding a "
                 "sentence-transformers model, or a LiteLLM embedding model for dspy.Embedder "
                 "(openai/text-embedding-3-small); a bank made with another one is embedded again on load")
DATABASE_HELP = ("a PostgreSQL database, postgresql://user@host:port/db (AMB_DATABASE_URL), that holds the named "
                 "banks (--bank NAME) and amb serve's tasks; default: files under STORAGE_DIR")


def fail(line: str, code: int = 1) -> None:
    """End a command of the server's (``amb serve``, ``amb keys``) before it serves: ``error: LINE`` on stderr, exit
    ``code`` (1: it could not start; 2: a bad flag or setting)."""
    typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code) from None


def serve_command(
    http: int | None = typer.Option(None, "--http", min=1, max=65535, help="serve streamable HTTP on this port (path /mcp) instead of stdio"),
    host: str = typer.Option("127.0.0.1", "--host", help="the address to listen on with --http (default: this machine only)"),
    lm: str | None = typer.Option(None, "--lm", help="the memory agents' LM: dspy model string, 'local', 'gguf:PATH' or 'python:module:factory'"),
    policy: str | None = typer.Option(None, "--policy", help="lm, heuristic (no LM for the memory agents) or auto (default)"),
    compiled: str | None = typer.Option(None, "--compiled", help="directory written by `amb optimize`"),
    idle: float = typer.Option(1800.0, "--idle", min=1.0, help="seconds after which an unused task is exported and closed"),
    max_tasks: int = typer.Option(256, "--max-tasks", min=1, help="tasks open at once"),
    remember: bool = typer.Option(False, "--remember", help="memory_end_task writes to long-term memory unless told otherwise"),
    namespace: str | None = typer.Option(None, "--namespace", help="the default long-term memory namespace"),
    allow_dir: list[Path] = typer.Option([], "--allow-dir", help="a folder beyond STORAGE_DIR that memory_start_task may read bank files from (repeatable)"),
    allow_host: list[str] = typer.Option([], "--allow-host", help="a Host header (name or address, optionally :PORT) the HTTP server answers to beyond loopback names and --host (repeatable)"),
    print_config: str | None = typer.Option(None, "--print-config", help="print the MCP config for claude or cursor that starts this server (this install, absolute paths) and exit"),
    embedder: str | None = typer.Option(None, "--embedder", help=EMBEDDER_HELP),
    database: str | None = typer.Option(None, "--database", "--database-url", help=DATABASE_HELP),
) -> None:
    """Serve the memory bank to any agent over MCP: stdio by default, streamable HTTP with --http PORT."""

    config = _settings(lm=lm, policy=policy, namespace=namespace, remember=remember or None, embedder=embedder,
                       database_url=database)
    if print_config is not None:
        flags = [*(["--lm", lm] if lm else []), *(["--policy", policy] if policy else []),
                 *(["--compiled", str(Path(compiled).resolve())] if compiled else []),
                 *(["--namespace", namespace] if namespace else []), *(["--remember"] if remember else []),
                 *(["--embedder", config.embedding.embedder] if embedder else []),
                 *(["--database", config.paths.database_url] if database else []),
                 *[flag for folder in allow_dir for flag in ("--allow-dir", str(folder.resolve()))]]
        typer.echo(client_config(print_config, flags))
        return
    keys = _http_keys(host, allow_host, config) if http else None
    bank = _opened_bank(config, compiled, allow_dir)
    if bank.notice and config.models.policy != "heuristic":  # the heuristic policy calls no LM
        print(f"note: {bank.notice}", file=sys.stderr, flush=True)  # stdout is the protocol's, under stdio
    where = f"http://{host}:{http}/mcp" if http else "stdio"
    print(f"amb serve: memory bank MCP server on {where} (policy {bank.config.models.policy})", file=sys.stderr,
          flush=True)
    from amb_dspy.serve.server import serve

    serve(bank, http_port=http, host=host, idle_s=idle, max_tasks=max_tasks, allowed_dirs=allow_dir, keys=keys,
          allow_hosts=allow_host)


def _opened_bank(config, compiled: str | None, allow_dir: list[Path]):
    """The bank the server serves, its embedding model loaded, its ``--allow-dir`` folders checked and its database
    (AMB_DATABASE_URL) reached, with its schema brought up to date, before serving; exit 1 in one line when any of
    it fails."""
    from amb_dspy.errors import InputError, UserError, one_line

    try:
        from amb_dspy.bank import MemoryBank
        from amb_dspy.serve.server import warm_up  # the server's SDK, missing: one line before serving

        for folder in allow_dir:
            if not folder.is_dir():
                raise InputError(f"--allow-dir {folder}: no such folder")
        bank = MemoryBank(config, compiled=compiled)
        warm_up(bank)  # a model that cannot load is one line here, not a failure of the first call
        if config.paths.database_url:
            from amb_dspy.serve.task_store_pg import open_database

            open_database(config.paths.database_url)
    except ImportError as exc:
        fail(f"{one_line(exc)}: install the server with pip install 'amb-dspy[mcp]'")
    except UserError as exc:
        fail(one_line(exc))
    except Exception as exc:  # noqa: BLE001 - a bad flag or setting ends in one line before serving
        fail(f"{type(exc).__name__}: {one_line(exc)}")
    return bank


def _http_keys(host: str, allow_host: list[str], config):
    """The key store an HTTP server on ``host`` asks keys of (None: it asks none, on loopback without keys):
    ``config``'s database (AMB_DATABASE_URL) or its storage folder's file (:func:`~amb_dspy.serve.keys.open_key_store`),
    said on stderr with the Host names it answers to; exit 2 in one line when ``host`` is not loopback and
    there is no key, or an ``--allow-host`` is not a host; exit 1 when the database cannot be used."""
    from amb_dspy.errors import InputError, UserError, one_line

    try:
        from amb_dspy.serve.access import allowed_hosts, check_keys_for
        from amb_dspy.serve.keys import open_key_store

        store = open_key_store(config, config.paths.storage_dir)
        names = allowed_hosts(host, allow_host)
        keyed = check_keys_for(host, store)
    except ImportError as exc:
        fail(f"{one_line(exc)}: install the server with pip install 'amb-dspy[mcp]'")
    except InputError as exc:
        fail(one_line(exc), code=2)
    except UserError as exc:  # the database cannot be reached, or its schema is newer
        fail(one_line(exc))
    asked = f"a key ({store.where}; amb keys list)" if keyed else "no key (loopback; amb keys create to ask one)"
    print(f"amb serve: HTTP calls need {asked}; Host header one of {', '.join(names)} (--allow-host adds one)",
          file=sys.stderr, flush=True)
    return store if keyed else None


def _settings(**overrides):
    """The server's configuration, or exit 2 in one line before anything loads (as ``amb run`` does)."""
    from amb_dspy.errors import ConfigError, one_line
    from amb_dspy.lm.specs import checked_config

    try:
        return checked_config(**overrides)
    except ConfigError as exc:
        fail(one_line(exc), code=2)


def client_config(client: str, flags: list[str]) -> str:
    """The JSON an MCP client (``claude``: Claude Desktop, ``cursor``) needs to start ``amb serve`` with ``flags``
    over stdio: the ``amb`` of this install by its absolute path (or this Python with ``-m amb_dspy.cli``), so
    it works whatever the client's PATH. Both clients read the same ``mcpServers`` shape."""
    if client not in CLIENT_CONFIG_FILES:
        fail(f"--print-config takes {' or '.join(CLIENT_CONFIG_FILES)}, not {client!r}", code=2)
    amb = Path(sys.executable).parent / "amb"
    command, args = (str(amb), ["serve", *flags]) if amb.is_file() else (sys.executable, ["-m", "amb_dspy.cli", "serve", *flags])
    typer.echo(f"# add this to {CLIENT_CONFIG_FILES[client]}", err=True)
    return json.dumps({"mcpServers": {"amb-memory": {"command": command, "args": args}}}, indent=2)
