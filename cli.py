"""Run the ``amb`` command from a checkout: ``python cli.py ...`` (the app lives in amb_dspy.cli)."""

from amb_dspy.cli import app

if __name__ == "__main__":
    app()
