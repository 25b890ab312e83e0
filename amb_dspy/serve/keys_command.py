"""What ``amb keys`` does once its flags are parsed (the CLI registers :data:`keys_app`): the keys of
``amb serve --http``, kept hashed in ``STORAGE_DIR/keys.sqlite``, or in PostgreSQL with ``--database URL`` /
``AMB_DATABASE_URL`` (:func:`amb_dspy.serve.keys.open_key_store`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

keys_app = typer.Typer(help="Keys for amb serve --http: each reaches the long-term namespaces it names and the "
                            "tasks it started (kept hashed in STORAGE_DIR/keys.sqlite, or in PostgreSQL with "
                            "--database URL).", no_args_is_help=True)

DATABASE_HELP = ("a PostgreSQL database, postgresql://user@host:port/db, that holds the keys every replica of "
                 "amb serve shares (default AMB_DATABASE_URL; unset: STORAGE_DIR/keys.sqlite)")


def _database_option() -> Any:
    return typer.Option(None, "--database", help=DATABASE_HELP)


def _with_store(call: Callable[[Any], None], database: str | None) -> None:
    """``call(store)`` on the key store of ``database`` (else the configured one: AMB_DATABASE_URL, or the storage
    folder's file); a bad setting exits 2, bad input or an unusable database 1, in one line each."""
    from amb_dspy.errors import UserError, one_line
    from amb_dspy.serve.command import _settings, fail
    from amb_dspy.serve.keys import open_key_store

    config = _settings()
    try:
        store = open_key_store(database if database is not None else config, config.paths.storage_dir)
        call(store)
    except UserError as exc:
        fail(one_line(exc))


@keys_app.command("create")
def keys_create(namespace: list[str] = typer.Option(..., "--namespace", help="a long-term namespace the key reaches "
                                                     "(repeatable; the first is used when a call names none)"),
                name: str = typer.Option("", "--name", help="a label for the key (who or what holds it)"),
                database: str | None = _database_option()) -> None:
    """Make a key and print it, once: it is kept only as a hash."""
    def create(store) -> None:
        key, token = store.create(namespace, name)
        typer.echo(f"key {key.key_id} for namespaces {', '.join(key.namespaces)} (shown once, keep it safe):", err=True)
        typer.echo(token)

    _with_store(create, database)


@keys_app.command("list")
def keys_list(database: str | None = _database_option()) -> None:
    """The keys not revoked: id, label, namespaces, created (never the key itself)."""
    def show(store) -> None:
        keys = store.list()
        if not keys:
            typer.echo("no keys (amb keys create --namespace NS makes one)", err=True)
        for key in keys:
            typer.echo(f"{key.key_id}  {key.label or '-'}  {','.join(key.namespaces)}  {key.created}")

    _with_store(show, database)


@keys_app.command("revoke")
def keys_revoke(key_id: str = typer.Argument(..., help="the key's id, as amb keys list shows it"),
                database: str | None = _database_option()) -> None:
    """Revoke a key: every later call with it is refused (401), on a running server too."""
    def revoke(store) -> None:
        key = store.revoke(key_id)
        typer.echo(f"revoked key {key.key_id} ({key.label or 'no label'})")

    _with_store(revoke, database)
