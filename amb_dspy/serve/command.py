"""What ``amb serve`` does once its flags are parsed (the CLI registers :func:`serve_command`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


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
) -> None:
    """Serve the memory bank to any agent over MCP: stdio by default, streamable HTTP with --http PORT."""
    from amb_dspy.errors import InputError, UserError, one_line

    try:
        from amb_dspy.bank import MemoryBank
        from amb_dspy.config import AmbConfig
        from amb_dspy.serve.server import serve

        for folder in allow_dir:
            if not folder.is_dir():
                raise InputError(f"--allow-dir {folder}: no such folder")
        overrides = {k: v for k, v in {"lm": lm, "policy": policy, "namespace": namespace}.items() if v is not None}
        if remember:
            overrides["remember"] = True
        bank = MemoryBank(AmbConfig(**overrides), compiled=compiled)
    except ImportError as exc:
        typer.echo(f"error: {one_line(exc)}: install the server with pip install 'amb-dspy[mcp]'", err=True)
        raise typer.Exit(1) from None
    except UserError as exc:
        typer.echo(f"error: {one_line(exc)}", err=True)
        raise typer.Exit(1) from None
    except Exception as exc:  # noqa: BLE001 - a bad flag or setting ends in one line before serving
        typer.echo(f"error: {type(exc).__name__}: {one_line(exc)}", err=True)
        raise typer.Exit(1) from None
    if bank.notice:
        print(f"note: {bank.notice}", file=sys.stderr, flush=True)  # stdout is the protocol's, under stdio
    where = f"http://{host}:{http}/mcp" if http else "stdio"
    print(f"amb serve: memory bank MCP server on {where} (policy {bank.config.policy})", file=sys.stderr, flush=True)
    serve(bank, http_port=http, host=host, idle_s=idle, max_tasks=max_tasks, allowed_dirs=allow_dir)
