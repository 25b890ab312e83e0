"""The sections of the settings: one pydantic model per part of the bank that reads them.

Every field keeps the one name it has everywhere: the ``AMB_<NAME>`` environment variable, the keyword
argument of :class:`amb_dspy.config.AmbConfig`, its flat attribute (``config.max_loops``) and its attribute on
the section (``config.loops.max_loops``). Each section reads its own variables, so a section built alone
(``EmbeddingSettings()``) is configured exactly as the same section of an ``AmbConfig()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from platformdirs import user_data_dir
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from amb_dspy.config.environment import user_cache_dir

AgentName = Literal["classification", "structure", "analysis", "integration", "planning", "answer"]
AGENT_NAMES: tuple[AgentName, ...] = ("classification", "structure", "analysis", "integration", "planning", "answer")

ViewName = Literal["summary", "evidence"]  # what <memory> shows (amb_dspy.memory.view.VIEWS)

DEFAULT_LM = "deepseek/deepseek-chat"
DEFAULT_WINDOW = 8000  # an agent's prompt tokens when neither the configuration nor the LM says more


class Section(BaseSettings):
    """A group of settings, each from its keyword argument, else its ``AMB_<NAME>`` variable, else its default."""

    model_config = SettingsConfigDict(env_prefix="AMB_", extra="ignore", populate_by_name=True)


class ModelSettings(Section):
    """The LMs: which model runs the agents, its keys and sampling, how many calls at once, and who decides
    (the LM, the deterministic policies, or the LM with the policies behind it)."""

    lm: str = Field(DEFAULT_LM, description="dspy.LM model string, 'local', or 'gguf:PATH'")
    agent_lms: dict[str, str] = Field(default_factory=dict, description="per-agent LM model strings")
    llm_api_key: str = Field("", validation_alias=AliasChoices("AMB_LLM_API_KEY", "LLM_API_KEY"))
    llm_base_url: str = Field("", validation_alias=AliasChoices("AMB_LLM_BASE_URL", "LLM_BASE_URL"))
    temperature: float = 0.6
    max_tokens: int = 4096
    lm_threads: int | None = Field(None, ge=1, description="independent agent calls at once (classification "
                                   "chunks, structure calls); default 8 for hosted LMs, 1 for the embedded one")
    policy: Literal["lm", "heuristic", "auto"] = Field(
        "auto", description="lm: agents' LM only; heuristic: the deterministic policies only; auto: LM, then "
                            "the policy when the LM's output is unusable")

    @field_validator("agent_lms")
    @classmethod
    def _known_agents(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = set(value) - set(AGENT_NAMES)
        if unknown:
            raise ValueError(f"unknown agent(s) in agent_lms: {sorted(unknown)}; known: {list(AGENT_NAMES)}")
        return value


class RetrievalSettings(Section):
    """Hybrid (dense + BM25) retrieval over the memory graph."""

    retrieval_k: int = Field(5, ge=1)
    retrieval_alpha: float = Field(0.5, ge=0.0, le=1.0)


class EmbeddingSettings(Section):
    """The sentence embedder: which one (``embedder``: the bundled all-MiniLM-L6-v2, a local sentence-transformers
    folder or a model ``dspy.Embedder`` calls), and for the bundled one which backend computes it, in batches of how
    many texts, at which precision (onnx). Its exported ONNX models live under :attr:`PathSettings.cache_dir`."""

    embedder: str = Field("local", description="local (the bundled all-MiniLM-L6-v2), a folder holding a "
                          "sentence-transformers model, or a LiteLLM embedding model string for dspy.Embedder "
                          "(openai/text-embedding-3-small); see amb_dspy.config.embedder_spec (AMB_EMBEDDER)")

    embedding_backend: Literal["auto", "onnx", "sentence-transformers"] = Field(
        "auto", description="auto: ONNX Runtime when installed, else sentence-transformers (same vectors)")
    embedding_batch_size: int | None = Field(None, ge=1, description="None: the backend's own (onnx float32 8, torch 64); onnx int8 always runs one text a call")
    embedding_precision: Literal["int8", "float32"] = Field(
        "int8", description="onnx: int8, a dynamically quantized copy of the exported model (about 3x faster, "
                            "cosine >= 0.98 to float32), or float32, the exported model itself (AMB_EMBEDDING_PRECISION)")
    embedding_workers: int | None = Field(
        None, ge=1, description="onnx: batches run at once, each on its own session with one thread (None: one per "
                                "CPU, at most 4); the vectors do not depend on it (AMB_EMBEDDING_WORKERS)")
    embedding_node_vectors: Literal["sentences", "whole"] = Field(
        "sentences", description="the bundled model: a node's text of several sentences gets the token-weighted mean "
                                 "of its sentences' vectors (sentences: those an ingest embedded are not run again) "
                                 "or its own (whole); a chosen embedder embeds node texts whole (AMB_EMBEDDING_NODE_VECTORS)")

    @field_validator("embedder")
    @classmethod
    def _known_embedder(cls, value: str) -> str:
        """The setting in its checked, canonical form (``local``, ``st:/abs/folder``, ``dspy:provider/model``)."""
        from amb_dspy.config.embedder_spec import parse_embedder

        return str(parse_embedder(value))


class RankWeights(BaseModel):
    """How the views rank a question's source lines (:mod:`amb_dspy.memory.view`, whose docstring says what each
    term of the sum is for), and how many lines the summary view shows for a node whose summary does not fit.
    Chosen on LoCoMo 26 and HotpotQA dev 0-149 (``bench/memory_recall.py``; docs/memory-view.md lists the
    settings tried). A line's score is ``own (x ask_weight for a question) + node_weight x node score +
    context_weight x the best own score beside it + spread_weight x its share of the spreading + bridge_weight x
    a seed line's score that names its heading``, x ``other_weight`` for another speaker's line."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_weight: float = Field(0.3, ge=0.0, description="x the best score of a node that holds the line")
    hop_weight: float = Field(0.5, ge=0.0, description="a node's score is at least this x a linked node's (one hop)")
    context_weight: float = Field(0.5, ge=0.0, description="x the best own score of the lines just before and after")
    spread_weight: float = Field(0.3, ge=0.0, description="x the line's share of the spreading over the graph "
                                 "(personalized PageRank from the question's terms and best lines); 0: no spreading")
    spread_seeds: int = Field(3, ge=0, description="the best lines whose terms seed the spreading, beside the "
                              "question's terms (and whose headings bridge)")
    flat_share: float = Field(0.3, ge=0.0, le=1.0, description="share of the ranking given to the lines' own scores' "
                              "order, interleaved, before the graph's additions")
    ask_weight: float = Field(0.5, ge=0.0, description="x a question line's own score: in a dialogue the turn after "
                              "it holds the answer")
    bridge_weight: float = Field(1.0, ge=0.0, description="x the score of a seed line that names the heading over "
                                 "the line's paragraph, from another paragraph")
    other_weight: float = Field(0.7, ge=0.0, description="x the score of a line said by someone other than the one "
                                "speaker a question names (dialogues)")
    summary_lines: int = Field(3, ge=0, description="summary view: the best lines shown for a node whose summary "
                               "does not fit")


class ViewSettings(Section):
    """What the ``<memory>`` block shows, and in how many tokens (amb_dspy.memory.view)."""

    memory_view: ViewName = Field(
        "evidence", description="what <memory> shows: the nodes' summaries (spec), or the raw source lines "
                               "ranked through the graph (amb_dspy.memory.view; AMB_MEMORY_VIEW)")
    memory_tokens: int = Field(1000, ge=50, description="token budget of the <memory> block, in either view")
    bank_cache: int = Field(4, ge=0, description="bank versions a process keeps read and laid out for the tasks "
                            "started on them (amb_dspy.memory.bank_cache; 0: every task reads its bank again)")
    rank_weights: RankWeights = Field(
        default_factory=RankWeights, description="how the views rank lines (RankWeights); AMB_RANK_WEIGHTS is a "
                                                 "JSON object of the weights to change, e.g. '{\"node_weight\": 0.4}'")


class ToolSettings(Section):
    """The executor's tools: web search and visit, the local corpus, and the tool cache."""

    serper_api_key: str = Field("", validation_alias=AliasChoices("AMB_SERPER_API_KEY", "SERPER_API_KEY"))
    jina_api_key: str = Field("", validation_alias=AliasChoices("AMB_JINA_API_KEY", "JINA_API_KEY"))
    tool_cache: bool = Field(True, description="answer a repeated search or visit of the task from memory (AMB_TOOL_CACHE=0: off)")
    search_k: int = Field(10, ge=1, description="results per search (at most 3 on the embedded model)")
    corpus: Path | None = Field(None, description="local search corpus: a folder or a JSONL of passages")
    corpus_cache: bool = Field(True, description="keep a local corpus's passages and vectors under cache_dir")
    http_timeout_s: float = 20.0
    visit_max_chars: int = Field(200_000, description="cap on the text a visited page may contribute")
    allow_private_urls: bool = Field(False, description="let visit fetch loopback, private, link-local and other "
                                                        "non-public addresses (AMB_ALLOW_PRIVATE_URLS=1)")
    max_observation_chars: int = Field(20_000, ge=200, description="cap on one tool response as the executor's LM "
                                                                   "sees it; memory records the whole response")
    max_convert_chars: int = Field(20_000, ge=200, description="the most text of one observation memory conversion "
                                   "reads with the LM: the passages most relevant to the goal; the whole response "
                                   "is kept raw in the Interaction Tree (amb_dspy.memory.conversion_budget)")


class ExecutorSettings(Section):
    """The executor (dspy.ReAct), the strategy that may stand in for it, and the fast path that may answer from
    memory first."""

    react_max_iters: int = Field(6, ge=1)
    max_context_tokens: int = 32_000
    strategy: Literal["auto", "loop", "direct"] = Field(
        "auto", description="loop: the spec's loop (plan, ReAct executor, answer); direct: the memory agents' "
                            "policies and one answer call from memory, the corpus searched first when memory does "
                            "not cover the goal; auto: direct for a tiny LM (amb_dspy.lm.profile), else loop")
    fast_path: bool | None = Field(None, description="when a run starts with memory, answer from it first in one call "
                                   "and end there if it suffices (AMB_FAST_PATH=0 / --no-fast: off); None: on, except "
                                   "with the bundled 135M model, whose verdicts are not reliable (amb_dspy.answering)")


class AgentSettings(Section):
    """The memory agents' windows, chunking, topic sizes and ingest batching.

    The memory-conversion agents pack their input into calls, so a larger window means fewer calls for the
    same prompt tokens: None follows the LM (LiteLLM's max_input_tokens, an embedded model's room; else
    DEFAULT_WINDOW). The others cut their input to their window, so theirs stays fixed (amb_dspy.agents.base)."""

    classification_window: int | None = None
    structure_window: int | None = None
    analysis_window: int | None = None
    integration_window: int = DEFAULT_WINDOW
    planning_window: int = DEFAULT_WINDOW
    answer_window: int = DEFAULT_WINDOW
    chunk_ratio: float = Field(0.9, gt=0.0, le=1.0)
    topic_min_tokens: int = Field(80, ge=1, description="classification: a topic node's smallest size in tokens, "
                                  "where the text allows (a dialogue's topics never span sessions past it)")
    topic_max_tokens: int = Field(300, ge=20, description="classification: a topic node's largest size in tokens")
    ingest_batch: int | None = Field(None, ge=1, description="most clusters (structure) or new nodes (analysis) one "
                                     "call takes, within the agent's window; 1: a call each; default 24 for hosted "
                                     "LMs, 1 for the embedded model (AMB_INGEST_BATCH)")
    ingest_analysis: Literal["conversion", "ordered"] = Field(
        "conversion", description="conversion: the new nodes of one conversion are judged on the graph as it found "
                                  "them, verdicts applied in order after (batched, the same bank as one call a node); "
                                  "ordered: each node after the verdicts on the nodes before it, one call each; the "
                                  "heuristic policy always orders (AMB_INGEST_ANALYSIS, amb_dspy.memory.writer)")

    @field_validator("ingest_analysis", mode="before")
    @classmethod
    def _renamed_analysis_orders(cls, value):
        """The names of the previous release: ``exact`` kept the strict order, ``snapshot`` judged a batch at once."""
        return {"exact": "ordered", "snapshot": "conversion"}.get(value, value)

    def window(self, agent: AgentName) -> int | None:
        """The configured window of ``agent``; None: it follows the LM (see the class docstring)."""
        return getattr(self, f"{agent}_window")


class LimitSettings(Section):
    """What a task may bring."""

    max_context_bytes: int = Field(1_000_000, ge=1, description="largest context a task may bring")


class LoopSettings(Section):
    """The bank's loop caps: when a run stops."""

    max_loops: int = Field(8, ge=1, description="execution-loop iterations before the bank stops")
    max_lm_calls: int = Field(400, ge=1, description="LM calls per run before the bank stops")
    max_merge_rounds: int = Field(5, ge=1, description="merge -> re-analysis rounds per conflict")


class LongTermSettings(Section):
    """Long-term memory across tasks (amb_dspy.longterm)."""

    longterm_backend: str = Field("sqlite", description="sqlite (a file under storage_dir), chroma, qdrant or postgres "
                                  "(the database of longterm_url when it is postgresql://..., else database_url)")
    longterm_url: str = Field("", description="a Chroma or Qdrant server, http://host:port, or for postgres a "
                              "postgresql:// database; empty: embedded under storage_dir (postgres: database_url)")
    longterm_api_key: str = Field("", description="the Qdrant server's API key (AMB_LONGTERM_API_KEY)")
    longterm_dual_write: bool = Field(False, description="write the local SQLite store too; a server missed while "
                                      "down is caught up on the next connection (AMB_LONGTERM_DUAL_WRITE=1)")
    longterm_max_tokens: int = Field(600, ge=50, description="token budget of the recalled block in <memory>")
    longterm_router: Literal["heuristic", "lm"] = Field(
        "heuristic", description="who decides when to read and write long-term memory (amb_dspy.longterm.route)")
    remember: bool = Field(False, description="write the task's conclusion and trajectory to long-term memory")
    recall: bool | None = Field(None, description="show earlier tasks' items in <memory> (None: when a store exists)")
    redact: bool = Field(False, description="remove e-mails, phone numbers and secrets before remembering")
    namespace: str = Field("default", description="the long-term memory namespace (a user, an agent, a task type)")


class PathSettings(Section):
    """Where the bank keeps its files."""

    storage_dir: Path = Field(default_factory=lambda: Path(user_data_dir("amb-dspy")) / "storage")  # AMB_STORAGE_DIR
    database_url: str = Field("", description="a PostgreSQL server, postgresql://user@host:port/db, that holds named "
                              "banks, the server's tasks and keys (AMB_DATABASE_URL); empty: files under storage_dir")
    checkpoint_dir: Path | None = Field(None, description="write a checkpoint here after every loop (amb run --resume)")
    temp_dir: Path = Field(default_factory=lambda: Path(user_data_dir("amb-dspy")) / "temp")  # AMB_TEMP_DIR
    cache_dir: Path = Field(default_factory=lambda: user_cache_dir() / "amb-dspy",
                            description="the exported ONNX embedding model and corpus indexes (AMB_CACHE_DIR)")

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        """Empty, or a PostgreSQL URL (``postgresql://`` or ``postgres://``): anything else is refused before use."""
        value = value.strip()
        if value and value.split("://", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError("not a PostgreSQL URL: postgresql://user@host:port/database")
        return value