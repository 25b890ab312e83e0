"""Shared fixtures: the real embedding model, loaded once per test session."""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tests that want the corpus cache pass their own cache_dir; the rest must not fill ~/.cache.
os.environ.setdefault("AMB_CORPUS_CACHE", "0")
# Checkpoints and long-term memory of tests that name no storage folder go to a fresh one, not the user's.
os.environ.setdefault("AMB_STORAGE_DIR", tempfile.mkdtemp(prefix="amb-test-storage-"))


@pytest.fixture(scope="session")
def embedder():
    from amb_dspy.retrieval.embedding import default_embedder

    model = default_embedder()
    model.embed(["warm-up"])
    return model
