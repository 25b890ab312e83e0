"""Shared fixtures: the real embedding model, loaded once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def embedder():
    from amb_dspy.retrieval.embedding import default_embedder

    model = default_embedder()
    model.embed(["warm-up"])
    return model
