"""What the five memory agents share: their error, their base module, and how they size prompts.

Every agent is a small ``dspy.Module`` holding one ``dspy.Predict`` under a stable attribute name, so
compiled state (instructions and demos) saves and loads by that name. Agents take and return pydantic
models, never touch storage, and call whatever LM is configured (``dspy.configure`` /
``dspy.context``), or the ``lm=`` they were built with.

Prompt sizing. An agent's window (``AmbConfig.<agent>_window``; for the agents that pack memory
conversion into calls, classification, structure and analysis, by default the LM's own window as
LiteLLM's model table gives it, else 8000; for the others 8000; always capped by what an embedded
model's context leaves after its answer, see ``amb_dspy.lm.prompt_budget``) bounds the whole prompt
it sends: instructions, field descriptions, compiled demos and inputs. The share left for the
variable input is

    budget = int(window * chunk_ratio) - overhead

where ``overhead`` is the token count of the prompt rendered by the active adapter with the variable
input left empty (so compiled demos are counted too). The remaining ``1 - chunk_ratio`` of the window
(10% by default) is headroom for the chat template, counting error and the reply.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, ClassVar

import dspy
import pydantic
from dspy.utils.exceptions import AdapterParseError, LMError

from amb_dspy.agents.chunking import TokenCounter, token_counter_for
from amb_dspy.config import DEFAULT_WINDOW, AgentName, AgentSettings, AmbConfig, ModelSettings
from amb_dspy.errors import AmbError, ConfigError
from amb_dspy.lm import input_window, is_embedded, prompt_budget
from amb_dspy.retrieval.keyword import STOPWORDS
from amb_dspy.text import split_sentences, words

logger = logging.getLogger("amb_dspy.agents")

# Keywords as the LM writes them. maxItems is a hint in the JSON schema only, not validated: it becomes
# part of the llama.cpp grammar, which stops a small model repeating keywords until max_tokens runs out,
# while a hosted LM that writes nine keywords is not failed for it.
KEYWORDS_MAX = 8
LMKeywords = Annotated[list[str], pydantic.Field(json_schema_extra={"maxItems": KEYWORDS_MAX})]

# Calls at once to a hosted LM: each is a round trip of a second or more, and providers accept a few.
HOSTED_LM_THREADS = 8
# Clusters or new nodes one ingest call takes from a hosted LM (chosen on LoCoMo conversation 26).
HOSTED_INGEST_BATCH = 24

# The least room an agent accepts for its variable input after instructions and demos.
MIN_INPUT_BUDGET = 64


class AgentError(AmbError):
    """An agent could not get a usable answer from its LM: unparseable or incoherent output after
    DSPy's own adapter fallback, or a failed LM call (network, auth, context length...).

    ``agent`` is the agent's name; ``raw`` the LM's raw output ("" when there was none).
    """

    def __init__(self, agent: str, message: str, raw: str = ""):
        self.agent = agent
        self.message = message
        self.raw = raw
        super().__init__(f"{agent} agent: {message}")


class Borrowed:
    """An object a module uses but must not copy (an LM, a tokenizer, an embedding model, agents held
    fixed): optimizers deep-copy programs, these are shared by the copies, and a llama.cpp model
    cannot be copied at all."""

    def __init__(self, value: Any):
        self.value = value

    def __deepcopy__(self, memo: dict) -> Borrowed:
        return self


class MemoryAgent(dspy.Module):
    """Base of the five agents: configuration, LM selection, token counting and error translation."""

    name: ClassVar[AgentName]

    def __init__(self, config: AmbConfig | None = None, token_counter: TokenCounter | None = None, lm: Any = None):
        super().__init__()
        # An agent keeps the part of the settings it reads: its section (windows, chunking, batching) and
        # the models' lm_threads. Without a config, the sections read the environment as AmbConfig() would.
        self.settings = config.agents if config is not None else AgentSettings()
        self.configured_threads = config.models.lm_threads if config is not None else ModelSettings().lm_threads
        self._token_counter = Borrowed(token_counter)
        self._lm = Borrowed(lm)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A whole-program pickle saved before agents kept only their section holds the whole config.
        if "config" in state and "settings" not in state:
            config = state.pop("config")
            state.update(settings=config.agents, configured_threads=config.models.lm_threads)
        super().__setstate__(state)

    # --- LM and tokens --------------------------------------------------------------------------

    def active_lm(self) -> Any:
        """The LM this agent was built with, else the configured one."""
        return self._lm.value or dspy.settings.lm

    def lm_threads(self) -> int:
        """How many of this agent's independent calls may run at once: the ``lm_threads`` setting, else 8 for a
        hosted LM (each call is a network round trip) and 1 for the embedded model (its engine runs one
        generation at a time)."""
        if self.configured_threads:
            return self.configured_threads
        lm = self.active_lm()
        return 1 if lm is None or is_embedded(lm) else HOSTED_LM_THREADS

    def ingest_batch(self) -> int:
        """How many clusters (structure) or new nodes (analysis) one call may take: the ``ingest_batch`` setting,
        else 24 for a hosted LM and 1 for the embedded model (its 1,024-token answers hold few summaries
        and its batch answers seldom parse, so batching cost it more calls than asking one at a time)."""
        if self.settings.ingest_batch:
            return self.settings.ingest_batch
        lm = self.active_lm()
        return 1 if lm is None or is_embedded(lm) else HOSTED_INGEST_BATCH

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text``: the ``token_counter=`` given, else the active LM's tokenizer, else the estimate."""
        counter = self._token_counter.value or token_counter_for(self.active_lm())
        return counter(text)

    @property
    def window(self) -> int:
        """The configured window, else (None) the active LM's (:func:`~amb_dspy.lm.input_window`), else
        :data:`~amb_dspy.config.DEFAULT_WINDOW`; capped by an embedded model's prompt room (its context
        minus its answer's share)."""
        window = self.settings.window(self.name)
        lm = self.active_lm()
        if window is None:
            window = (input_window(lm) if lm is not None else None) or DEFAULT_WINDOW
        limit = prompt_budget(lm) if lm is not None else None
        return min(window, limit) if limit else window

    @contextmanager
    def _lm_context(self) -> Iterator[None]:
        if self._lm.value is None:
            yield
        else:
            with dspy.context(lm=self._lm.value):
                yield

    def prompt_tokens(self, predictor: dspy.Predict, **inputs: Any) -> int:
        """Tokens of the full prompt ``predictor`` would send for ``inputs`` (demos included)."""
        adapter = dspy.settings.adapter or dspy.ChatAdapter()
        messages = adapter.format(predictor.signature, predictor.demos, inputs)
        return sum(self.count_tokens(_message_text(m)) for m in messages)

    def content_budget(self, predictor: dspy.Predict, **empty_inputs: Any) -> int:
        """Tokens left for the variable input once the prompt around it is counted (see module docstring)."""
        overhead = self.prompt_tokens(predictor, **empty_inputs)
        budget = int(self.window * self.settings.chunk_ratio) - overhead
        if budget < MIN_INPUT_BUDGET:
            raise ConfigError(
                f"{self.name} window of {self.window} tokens leaves {budget} for input after {overhead} tokens of "
                f"instructions and demos; raise AMB_{self.name.upper()}_WINDOW"
            )
        return budget

    def check_window(self) -> None:
        """Raise :class:`ConfigError` when the window leaves no room for input; the bank calls it before
        any LM call. Agents whose prompts are not sized to a window have nothing to check."""

    # --- calling the LM -------------------------------------------------------------------------

    def call(self, predictor: dspy.Predict, **inputs: Any) -> dspy.Prediction:
        """Run ``predictor``; LM trouble comes out as :class:`AgentError`, never as a half-filled result."""
        with self._lm_context():
            try:
                return predictor(**inputs)
            except AdapterParseError as exc:
                raise AgentError(self.name, "could not parse the LM output", raw=str(exc.lm_response or "")) from exc
            except pydantic.ValidationError as exc:
                raise AgentError(self.name, f"LM output failed validation: {exc}") from exc
            except LMError as exc:
                raise AgentError(self.name, f"LM call failed: {exc}") from exc

    def fail(self, message: str, prediction: dspy.Prediction | None = None) -> AgentError:
        """An :class:`AgentError` for output that parsed but makes no sense, carrying what the LM said."""
        raw = ""
        if prediction is not None:
            raw = json.dumps(_jsonable(dict(prediction.items())), ensure_ascii=False)
        return AgentError(self.name, message, raw=raw)


def answer_tokens(lm: Any) -> int | None:
    """Tokens a reply of ``lm`` may use (most of its ``max_tokens``, the rest for the format), None if unset:
    what a batch call's answers must fit besides the window its prompt fits."""
    limit = getattr(lm, "kwargs", {}).get("max_tokens") if lm is not None else None
    return int(limit * 0.8) if limit else None


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _jsonable(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def dedupe(items: list[str]) -> list[str]:
    """Non-empty strings of ``items``, stripped, first occurrence kept (case-insensitive)."""
    seen: set[str] = set()
    out = []
    for item in items:
        item = str(item).strip()
        if item and item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def fallback_keywords(text: str, limit: int = 5) -> list[str]:
    """The most frequent words of four letters or more (first occurrence breaks ties), for clusters the LM did not describe."""
    terms = [w for w in words(text, "term") if w.lower() not in STOPWORDS]
    counts = Counter(w.lower() for w in terms)
    first: dict[str, str] = {}
    for w in terms:
        first.setdefault(w.lower(), w)
    ranked = sorted(first, key=lambda w: -counts[w])  # sorted() is stable: ties keep text order
    return [first[w] for w in ranked[:limit]]


def fallback_context(text: str, words: int = 25) -> str:
    """A one-line description of ``text`` from its first sentence, for clusters the LM did not describe."""
    first_line = " ".join(text.split())
    sentence = (split_sentences(first_line, rule="stop") or [""])[0]
    tokens = sentence.split()
    return " ".join(tokens[:words]) + (" ..." if len(tokens) > words else "")
