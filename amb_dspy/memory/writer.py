"""Memory conversion (spec §4.3) and conflict resolution (§4.4): text becomes nodes, nodes are related
to what retrieval finds for them, and checked conflicts are merged.

:class:`MemoryWriter` holds no state of its own between calls: the store is the memory, and every agent is
called through the task's :class:`~amb_dspy.agents.runner.AgentRunner` (which decides LM or policy, sets the
agent's LM and meters it). It takes plain inputs (texts, tool responses as
:class:`~amb_dspy.memory.written.ToolResponse`, a :class:`~amb_dspy.memory.written.Conflict`) and returns
what each call did as a :class:`~amb_dspy.memory.written.Written` (conversions, errors, conflicts found,
notices): the task takes that into its run state; the writer knows nothing of tasks.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from amb_dspy.agents import AgentError, NeighborInfo, NodeInfo, NodeWithNeighbors
from amb_dspy.agents.classification import Cluster
from amb_dspy.agents.runner import AgentRunner
from amb_dspy.agents.structure import ClusterText
from amb_dspy.config import AmbConfig
from amb_dspy.lm import LMCallCapReached
from amb_dspy.memory.conversion_budget import budget_observation
from amb_dspy.memory.dates import resolve_dates
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.written import Conflict, Conversion, ToolResponse, Written, knowledge_text
from amb_dspy.retrieval.embedding import remember_vectors
from amb_dspy.storage import ContextUpdate, InteractionEntry, NodeContent, QueryGraphNode

# How much of a cross-validation (answer + tool responses) the integration agent is shown.
MAX_VALIDATION_CHARS = 12_000


def node_info(node: QueryGraphNode) -> NodeInfo:
    """A stored node as agents see it (no embedding; a node judged alone is shown without its id, see
    :meth:`MemoryWriter._alone`)."""
    return NodeInfo(id=node.id, summary=node.summary, context=node.context, keywords=list(node.keywords))


@contextlib.contextmanager
def until_capped(written: Written) -> Iterator[None]:
    """Run part of a write; the LM call cap, when it stops it, is kept in ``written.stopped`` (the task raises
    it after taking in what was written before) rather than losing what the call had found."""
    try:
        yield
    except LMCallCapReached as exc:
        written.stopped = exc


class MemoryWriter:
    """Writes one run's findings into its store through the memory agents."""

    def __init__(self, store: MemoryStore, config: AmbConfig, runner: AgentRunner, emit: Callable[..., None]):
        self.store, self.config = store, config
        self.runner, self._emit = runner, emit
        self._agent = runner.call

    @staticmethod
    def _one(write: Callable[..., Conversion], *args: Any) -> Written:
        """What a call that writes one text did: its conversion and what it found (see :func:`until_capped`)."""
        written = Written()
        with until_capped(written):
            written.conversions.append(write(written, *args))
        return written

    # --- memory conversion (§4.3) ------------------------------------------------------------
    def convert(self, text: str, metadata: dict[str, Any], attachments: list = ()) -> Written:
        """Turn text into nodes (classification -> structure -> add -> retrieve -> analysis) and an entry.

        If classification or structure fails, no node is added, but the text is still kept as an
        interaction entry (marked ``conversion_failed``).
        """
        return self._one(self._convert, text, metadata, attachments)

    def _convert(self, written: Written, text: str, metadata: dict[str, Any], attachments: list = ()) -> Conversion:
        try:
            pieces = self._classify_structure(text, [0])
        except AgentError as exc:
            written.errors.append(str(exc))
            return Conversion([], str(exc), self.keep_raw(text, metadata, str(exc), attachments))
        except LMCallCapReached as exc:  # the run stops, the text stays
            self.keep_raw(text, metadata, str(exc), attachments)
            raise
        with self.store.transaction():
            nodes = self.store.add_nodes([draft for _, draft, _ in pieces])
            entry = self.store.record_entry(InteractionEntry(text=text, metadata=metadata, attachments=tuple(attachments)),
                                    [n.id for n in nodes],
                                    spans={node.id: spans for node, (_, _, spans) in zip(nodes, pieces)})
        return Conversion(nodes, self._analyse_new(written, nodes), entry)

    def add_document(self, text: str, name: str, date: str = "") -> Written:
        """Add one document to the store, new or already holding others: its own interaction entry (its
        ``name``, its ``date`` when given, its content hash), its nodes related by analysis to those already
        there (:meth:`convert`). Its conversion None, and nothing changed, when the store holds an entry with
        the same content: re-adding an unchanged document is a no-op.

        A document of the same ``name`` with other content is an older version: the new entry names it
        (``metadata["supersedes"]``) and, once the new text is memory, the old version's nodes are marked
        superseded (:meth:`MemoryStore.supersede`): the tree and the graph keep both, readers prefer the new."""
        return self.add_documents([(text, name, date)])

    def add_documents(self, documents: Sequence[tuple[str, str, str]]) -> Written:
        """:meth:`add_document` for each ``(text, name, date)`` in order (the sessions of one conversation): a
        conversion per document, None for one the store already held.

        When analysis is sequential (the heuristic policy, ``ingest_analysis="ordered"``) each document is a
        conversion of its own (:meth:`_convert_each`): the bank is the one the documents added one by one make.
        Otherwise they are one conversion (:meth:`_convert_together`), in as few LM calls as one text of them all
        would take. The LM call cap keeps raw every text it leaves unconverted."""
        pending, seen = [], set()
        for text, name, date in documents:
            metadata = self._document_metadata(text, name, date)
            if metadata is not None and metadata["sha256"] in seen:  # the same text twice: the first is added
                metadata = None
            pending.append((text, metadata))
            seen.add(metadata["sha256"] if metadata else "")
        new = [(text, metadata) for text, metadata in pending if metadata is not None]
        written = Written()
        with until_capped(written):
            if self._sequential() or len(new) < 2:
                converted = self._convert_each(written, new)
            else:
                converted = self._convert_together(written, new)
                for conversion in converted:
                    self._supersede(conversion)
            found = iter(converted)
            written.conversions = [None if metadata is None else next(found) for _, metadata in pending]
        return written

    def _convert_each(self, written: Written, documents: list[tuple[str, dict[str, Any]]]) -> list[Conversion]:
        """Each document converted on its own, in order, superseding its older version once it is memory."""
        converted: list[Conversion] = []
        for i, (text, metadata) in enumerate(documents):
            try:
                converted.append(self._convert(written, text, metadata))
            except LMCallCapReached as exc:  # convert kept its own text raw; the later ones are kept raw here
                for later, later_metadata in documents[i + 1:]:
                    self.keep_raw(later, later_metadata, str(exc))
                raise
            self._supersede(converted[-1])
        return converted

    def _supersede(self, conversion: Conversion) -> None:
        """A document that is a newer version (``metadata["supersedes"]``): its older version's nodes marked."""
        previous = conversion.entry.metadata.get("supersedes") if conversion.entry is not None else None
        if previous is not None and conversion.remembered is not None:
            self.store.supersede(previous, conversion.remembered.entry_id)

    def _document_metadata(self, text: str, name: str, date: str) -> dict[str, Any] | None:
        """The entry metadata of a document to add (see :meth:`add_document`), or None when the store holds it."""
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        known, previous = self.store.entry_with_hash(digest), self.store.tree.document_named(name)
        # the same text is a no-op, unless it is an older version of this document brought back (a reverted note)
        if known is not None and not (previous is not None and previous.metadata["sha256"] != digest
                                      and known.metadata.get("name") == name):
            return None
        # relative dates resolved once, at ingest, against each line's stamp (amb_dspy.memory.dates), else the date given
        metadata: dict[str, Any] = {"source": "user_context", "name": name, "sha256": digest,
                                    "dates": [list(d) for d in resolve_dates(text, date)]}
        if date:
            metadata["date"] = date
        if previous is not None:
            metadata["supersedes"] = previous.entry_id
        return metadata

    def _convert_together(self, written: Written, documents: list[tuple[str, dict[str, Any]]]) -> list[Conversion]:
        """One conversion of several documents: classified as one text (their texts a blank line apart) and
        structured in one batch, a topic that crosses from one document into the next cut there; each document
        its own entry holding its topics' nodes; all the new nodes analysed as one conversion's."""
        texts = [text for text, _ in documents]
        starts = [sum(len(t) + 2 for t in texts[:i]) for i in range(len(texts))]
        try:
            pieces = self._classify_structure("\n\n".join(texts), starts)
        except AgentError as exc:
            written.errors.append(str(exc))
            return [Conversion([], str(exc), self.keep_raw(text, metadata, str(exc))) for text, metadata in documents]
        except LMCallCapReached as exc:  # the run stops, the texts stay
            for text, metadata in documents:
                self.keep_raw(text, metadata, str(exc))
            raise
        with self.store.transaction():
            nodes = self.store.add_nodes([draft for _, draft, _ in pieces])
            entries = [self.store.record_entry(
                InteractionEntry(text=text, metadata=metadata),
                [node.id for node, (k, _, _) in zip(nodes, pieces) if k == i],
                spans={node.id: spans for node, (k, _, spans) in zip(nodes, pieces) if k == i})
                for i, (text, metadata) in enumerate(documents)]
        failure = self._analyse_new(written, nodes)
        return [Conversion([node for node, (k, _, _) in zip(nodes, pieces) if k == i], failure, entry)
                for i, entry in enumerate(entries)]

    def _classify_structure(self, text: str, starts: list[int]) -> list[tuple[int, NodeContent, list[tuple[int, int]]]]:
        """Classification -> structure of ``text`` made of documents starting at ``starts`` (``[0]``: one):
        ``(document number, node draft, spans in that document)`` of each topic. A topic with segments in two
        documents is cut into a topic in each, described alike. The structure agent packs the topics into as
        few calls as its window allows."""
        self._emit("memorise")
        clusters = self._agent("classification", context=text, task_goal=self.store.insight_doc.task_goal).clusters
        cut = cut_clusters(clusters, text, starts)
        structured = self._agent("structure", batch=structure_batch(cut)) if cut else []
        return [(k, NodeContent(summary=s.summary, context=c.context, keywords=list(c.keywords)), spans)
                for (k, c, spans), s in zip(cut, structured)]

    def convert_calls(self, calls: Sequence[ToolResponse], metadata: dict[str, Any]) -> Written:
        """Memory conversion of tool responses at a bounded cost: the one door for the bank's loop and for
        outside agents' observations alike.

        Each response is read within ``config.max_convert_chars`` and without its lines that are not
        language (:mod:`amb_dspy.memory.conversion_budget`). When that leaves anything out, the whole text is kept
        raw as an entry of its own, saying why (a notice of the run), and only the part read is converted,
        into an entry of its own that names the raw one (``excerpt_of``). The returned entry is the one
        holding the whole text, so a repeated call is answered from it.
        """
        return self._one(self._convert_calls, calls, metadata)

    def _convert_calls(self, written: Written, calls: Sequence[ToolResponse], metadata: dict[str, Any]) -> Conversion:
        text = knowledge_text(calls)
        doc = self.store.insight_doc
        goal = f"{doc.task_goal} {doc.current_task or ''}"
        budgeted = [budget_observation(c.observation, goal, self.config.tools.max_convert_chars) for c in calls]
        notice = "; ".join(dict.fromkeys(b.notice for b in budgeted if b.notice))
        if not notice:
            return self._convert(written, text, metadata)
        raw = self.store.record_entry(InteractionEntry(text=text, metadata={**metadata, "kept_raw": notice}))
        written.notices.append(f"{_calls_label(calls)}: {notice}")
        self._emit("notice", written.notices[-1])
        excerpt = "\n\n".join(b.text for b in budgeted if b.text)
        if not excerpt:
            return Conversion([], "", raw)
        converted = self._convert(written, excerpt, {**metadata, "excerpt_of": raw.entry_id})
        return converted._replace(entry=raw if converted.remembered is not None else converted.entry)

    def _analyse_new(self, written: Written, nodes: list[QueryGraphNode]) -> str:
        """Spec §4.3 steps 4-6 for the new nodes of one conversion; returns the last failure reason, or "".

        Each node is related to what retrieval finds for it among the nodes that existed before it (the
        later new nodes are excluded), in the conversion's order. With ``config.ingest_analysis ==
        "conversion"`` (the default under an LM policy) every node is judged on the graph as the
        conversion found it, the earlier new nodes included as they were drafted, and the verdicts are
        applied after, in order (a node re-described by two verdicts keeps the later one, as a node
        related to two candidates of one verdict always did). No verdict depends on another, so the
        analysis agent may pack the nodes into as few calls as its window allows, and the bank is the
        same whether they are asked one a call or batched. With "ordered" (and always under the
        heuristic policy, which makes no call to save) each node is judged, one call each, on the graph
        the verdicts on the nodes before it left: its candidates' rewritten contexts and their new
        neighbours."""
        exclusions = [{n.id for n in nodes[i + 1:]} for i in range(len(nodes))]
        if self._sequential():
            failure = ""
            for node, exclude in zip(nodes, exclusions):
                failure = self._analyse(written, node, exclude) or failure
            return failure
        found = [(node, self._candidates(node, exclude)) for node, exclude in zip(nodes, exclusions)]
        found = [(node, candidates) for node, candidates in found if candidates]
        if not found:
            return ""
        items = [(node_info(node), [node_info(c) for c in candidates]) for node, candidates in found]
        # an unusable batch answer (policy "lm") has each node asked alone
        verdicts = self.runner.call_batch("analysis", items, alone=lambda item: self._alone(*item))
        failure = ""
        for (node, _), verdict in zip(found, verdicts):
            if isinstance(verdict, str):
                failure = verdict
                continue
            self._apply(written, node, verdict)
        return failure

    def _sequential(self) -> bool:
        """Whether new nodes are analysed one a call, each on the graph the verdicts before it left."""
        return self.config.agents.ingest_analysis == "ordered" or self.config.models.policy == "heuristic"

    @staticmethod
    def _alone(node: NodeInfo, candidates: list[NodeInfo]) -> dict[str, Any]:
        """The inputs of one node's verdict in a call of its own (the node is shown without its id)."""
        return {"new_node": node.model_copy(update={"id": None}), "candidates": candidates}

    def _candidates(self, node: QueryGraphNode, exclude: set[str]) -> list[QueryGraphNode]:
        """What retrieval finds for ``node`` (top-k and one hop: :meth:`MemoryStore.retrieve_for_node`).

        The heuristic analysis embeds the node's and the candidates' texts again; their vectors are the store's
        already, and the embedder is handed them: a bank opened from a file holds thousands of nodes this
        process never embedded, and running the model on the candidates was most of an add's time."""
        retrieval = self.config.retrieval
        found = self.store.retrieve_for_node(node.id, k=retrieval.retrieval_k, alpha=retrieval.retrieval_alpha,
                                             exclude=exclude)
        nodes = [self.store.graph.node(node.id), *found]
        remember_vectors(self.store.embedder, [n.embedding_text for n in nodes], [n.embedding for n in nodes])
        return found

    def keep_raw(self, text: str, metadata: dict[str, Any], reason: str,
                 attachments: list = ()) -> InteractionEntry | None:
        """Record ``text`` as an entry that became no node, saying why, so no response is ever lost."""
        if not (text.strip() or attachments):
            return None
        return self.store.record_entry(InteractionEntry(text=text, metadata={**metadata, "conversion_failed": reason},
                                                        attachments=tuple(attachments)))

    def _analyse(self, written: Written, node: QueryGraphNode, exclude: set[str], round: int = 0) -> str:
        """Relate a node to what retrieval finds for it; returns a failure reason or ""."""
        candidates = self._candidates(node, exclude)
        if not candidates:
            return ""
        verdict = self.runner.try_call("analysis", **self._alone(node_info(node), [node_info(c) for c in candidates]))
        return verdict if isinstance(verdict, str) else self._apply(written, node, verdict, round)

    def _apply(self, written: Written, node: QueryGraphNode, verdict, round: int = 0) -> str:
        """Act on an analysis verdict in the spec's order of kinds: a conflict is queued, a related pair linked."""
        for rel in verdict.relationships:
            other = rel.existing_node_id
            if other not in self.store.graph or other == node.id:
                continue
            if rel.relationship == "conflict":
                if round >= self.config.loops.max_merge_rounds:
                    written.errors.append(f"conflict between {node.id} and {other} left unresolved: merge round cap reached")
                    continue
                written.conflicts.append(Conflict([node.id, other], rel.conflict_description or rel.reasoning, round))
            elif rel.relationship == "related":
                current = self.store.graph.node(node.id)
                existing = self.store.graph.node(other)
                self.store.relate(node.id, other, {
                    node.id: ContextUpdate(rel.context_update_new or current.context,
                                           list(rel.keywords_update_new or current.keywords)),
                    other: ContextUpdate(rel.context_update_existing or existing.context,
                                         list(rel.keywords_update_existing or existing.keywords)),
                })
        return ""

    # --- conflict resolution (§4.4) ----------------------------------------------------------
    def resolve_conflict(self, conflict: Conflict, validation: str) -> Written:
        """Merge ``conflict``'s nodes by what its cross-validation found (``validation``: its answer and the tool
        responses behind it, recorded whole; the integration agent is shown its start); the merged node goes
        back through analysis. Its conversion holds the merged node, or none when the nodes stay apart."""
        return self._one(self._resolve, conflict, validation)

    def _resolve(self, written: Written, conflict: Conflict, validation: str) -> Conversion:
        ids = [i for i in conflict.node_ids if i in self.store.graph]
        metadata = {"source": "cross_validation", "merged_node_ids": ids, "conflict": conflict.description}
        if len(ids) < 2:
            return Conversion([], "", self.keep_raw(validation, metadata, "the conflicting nodes are no longer in the graph"))
        nodes_to_merge = []
        for node_id in ids:
            node = self.store.graph.node(node_id)
            neighbours = [NeighborInfo(id=n.id, context=n.context, keywords=list(n.keywords))
                          for n in self.store.graph.get_neighbors(node_id) if n.id not in ids]
            nodes_to_merge.append(NodeWithNeighbors(id=node.id, summary=node.summary, context=node.context,
                                                    keywords=list(node.keywords), neighbors=neighbours))
        self._emit("merge")
        try:
            merged = self._agent("integration", nodes_to_merge=nodes_to_merge,
                                 validation_result=validation[:MAX_VALIDATION_CHARS])
        except AgentError as exc:
            written.errors.append(str(exc))
            return Conversion([], str(exc), self.keep_raw(validation, metadata, str(exc)))
        except LMCallCapReached as exc:
            self.keep_raw(validation, metadata, str(exc))
            raise
        if merged.merged_node is None:  # not merged: both nodes stay, the conflict is recorded as unresolved
            written.errors.append(f"conflict between {ids} left unresolved: {merged.interaction_tree_description}")
            return Conversion([], "", self.store.record_entry(
                InteractionEntry(text=validation, metadata={**metadata, "unresolved": True}), ids))
        with self.store.transaction():
            new, _event = self.store.merge_nodes(
                ids,
                merged.merged_node,
                description=merged.interaction_tree_description,
                neighbour_updates=dict(merged.neighbor_updates),
            )
            entry = self.store.record_entry(InteractionEntry(text=validation, metadata=metadata), [new.id])
        # The merged node goes back through retrieval and analysis, its inherited neighbours excluded.
        return Conversion([new], self._analyse(written, new, exclude=set(new.links), round=conflict.round + 1), entry)



def cut_clusters(clusters: Sequence[Cluster], text: str, starts: list[int]) -> list[tuple[int, Cluster, list[tuple[int, int]]]]:
    """Classification's clusters of ``text`` (documents starting at ``starts``) as ``(document number, cluster,
    spans in that document)``: a cluster with segments in two documents is cut into one in each."""
    cut = []
    for cluster in clusters:
        owner = [bisect.bisect_right(starts, a) - 1 for a, _ in cluster.spans]
        for k in dict.fromkeys(owner):
            mine = [(a, b) for (a, b), o in zip(cluster.spans, owner) if o == k]
            piece = cluster if len(mine) == len(owner) else \
                cluster.model_copy(update={"content": "\n\n".join(text[a:b] for a, b in mine)})
            cut.append((k, piece, [(a - starts[k], b - starts[k]) for a, b in mine]))
    return cut


def structure_batch(cut: Sequence[tuple[int, Cluster, list[tuple[int, int]]]]) -> list[ClusterText]:
    """The structure agent's input for the topics of :func:`cut_clusters`, one item a topic."""
    return [ClusterText(content=c.content, context=c.context, keywords=list(c.keywords)) for _, c, _ in cut]


def _calls_label(calls: Sequence[ToolResponse]) -> str:
    """Which tool calls a notice is about, e.g. ``search, visit``."""
    return ", ".join(dict.fromkeys(c.name for c in calls)) or "tool response"
