"""The ``amb`` command: parses, configures and calls the library; no logic of its own."""
from __future__ import annotations

import typer

app = typer.Typer(help="amb-dspy: an Agentic Memory Bank on DSPy.", no_args_is_help=True, add_completion=False)


@app.command()
def version() -> None:
    """Print the amb-dspy version."""
    from amb_dspy import __version__

    typer.echo(f"amb-dspy {__version__}")


if __name__ == "__main__":
    app()
