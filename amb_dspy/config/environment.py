"""The one place that reads or writes the process environment (a test keeps it so).

Settings come from ``AMB_*`` variables through :class:`amb_dspy.config.AmbConfig`; the functions here
cover the rest: variables other tools own (a provider's own API key, the XDG cache home, ``AMB_DEBUG``
of the CLI's error handler) and the defaults this package gives to libraries that read the environment
at import (OpenMP, Hugging Face, LiteLLM). A default never overrides what the user has set.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``: shared by runs from any working directory."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()


def debug_enabled() -> bool:
    """``AMB_DEBUG`` is set: the CLI shows an unexpected error's traceback instead of one line."""
    return bool(os.environ.get("AMB_DEBUG"))


def provider_api_key(provider: str) -> str:
    """A provider's own key as LiteLLM reads it (``DEEPSEEK_API_KEY`` for ``deepseek``), or ""."""
    return os.environ.get(f"{provider.upper()}_API_KEY", "")


def prefer_passive_openmp() -> None:
    """llama.cpp's and torch's OpenMP threads otherwise spin-wait between calls, which on 2 shared cores made
    a 60-token local generation take 60 s instead of 6 s. Must run before torch is imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def keep_hub_offline() -> None:
    """Hugging Face libraries load local model folders only, never from a hub, and draw no progress bars."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def use_bundled_litellm_model_table() -> None:
    """LiteLLM fetches its model table from the network at import unless told to use its bundled copy."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
