"""Layer 3, the Interaction Tree: the raw record of every interaction, append-only.

Entries are frozen and the tree has no method that edits or removes one. A merge re-points the
node -> entries index at the new node and records a MergeEvent; the entries themselves stay.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import PurePath
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, PrivateAttr

from amb_dspy.errors import AmbError
from amb_dspy.storage.clock import Timestamp, now


def new_id() -> str:
    return uuid.uuid4().hex


class AttachmentType(str, Enum):
    IMAGE = "image"
    DOCUMENT = "document"
    CODE = "code"


def _inside_path(path: str) -> str:
    """Refuse an attachment path that climbs out of the folder it is read from (``../../etc/passwd``)."""
    if ".." in PurePath(path.replace("\\", "/")).parts:
        raise ValueError(f"attachment path {path[:80]!r} climbs out of the storage directory ('..')")
    return path


class Attachment(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=new_id)
    type: AttachmentType
    content: Annotated[str, AfterValidator(_inside_path)] = Field(
        description="path of the file inside the bank's storage directory, never its bytes")


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _frozen_json(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """Metadata must survive a bank export, and nobody may edit it afterwards: JSON-checked, then frozen."""
    try:
        plain = json.loads(json.dumps(_thaw(value), ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"entry metadata must be JSON data: {exc}") from None
    return _freeze(plain)


FrozenMetadata = Annotated[Mapping[str, Any], AfterValidator(_frozen_json), PlainSerializer(_thaw, return_type=dict)]


class InteractionEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    entry_id: str = Field(default_factory=new_id)
    text: str
    timestamp: Timestamp = Field(default_factory=now)
    metadata: FrozenMetadata = Field(default_factory=dict)
    attachments: tuple[Attachment, ...] = ()


class MergeEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    event_id: str = Field(default_factory=new_id)
    merged_node_ids: tuple[str, ...]
    new_node_id: str
    timestamp: Timestamp = Field(default_factory=now)
    description: str = ""


class TreeError(AmbError, ValueError):
    """An operation would break the tree's append-only contract or its references."""


@dataclass
class _Journal:
    """What :meth:`InteractionTree.atomic` takes back if its block raises: the entries appended after the first
    ``entries``, the links of the nodes an entry was linked to (``linked``: node id -> its entry ids before, None
    when it had none), and, once a change dropped or moved links (a merge, a node removed), the whole index and
    merge events as they were then (``index``; the links journaled before it are put back over it)."""

    entries: int
    linked: dict[str, list[str] | None] = field(default_factory=dict)
    index: tuple[dict[str, list[str]], list[MergeEvent]] | None = None


class InteractionTree(BaseModel):
    # The stored collections are private so that nothing outside this class can edit them; the
    # public views are read-only.
    _entries: dict[str, InteractionEntry] = PrivateAttr(default_factory=dict)
    _node_to_entries: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    # Documents (entries with a content hash, metadata "sha256", and a "name"): the first entry of each content
    # hash and the newest of each name, kept as entries are added, so that adding a document to a bank of
    # thousands does not read them all.
    _by_hash: dict[str, str] = PrivateAttr(default_factory=dict)
    _by_name: dict[str, str] = PrivateAttr(default_factory=dict)
    _merge_events: list[MergeEvent] = PrivateAttr(default_factory=list)
    # Inside atomic(): what it takes to put the tree back as it was (see _Journal).
    _journal: _Journal | None = PrivateAttr(default=None)

    @property
    def entries(self) -> Mapping[str, InteractionEntry]:
        return MappingProxyType(self._entries)

    @property
    def node_to_entries(self) -> Mapping[str, tuple[str, ...]]:
        return MappingProxyType({k: tuple(v) for k, v in self._node_to_entries.items()})

    def entry_ids_of(self, node_id: str) -> tuple[str, ...]:
        """The ids of the entries linked to one node (``node_to_entries[node_id]`` without copying the whole index,
        which a save of a few nodes of a large bank would)."""
        return tuple(self._node_to_entries.get(node_id, ()))

    @property
    def merge_events(self) -> tuple[MergeEvent, ...]:
        return tuple(self._merge_events)

    def __len__(self) -> int:
        return len(self._entries)

    def with_hash(self, digest: str) -> InteractionEntry | None:
        """The first entry of a document whose text has the content hash ``digest`` (``metadata["sha256"]``)."""
        entry_id = self._by_hash.get(digest)
        return None if entry_id is None else self._entries[entry_id]

    def document_named(self, name: str) -> InteractionEntry | None:
        """The newest entry of the document called ``name`` (an entry with a content hash and that name)."""
        entry_id = self._by_name.get(name)
        return None if entry_id is None else self._entries[entry_id]

    def _index_document(self, entry: InteractionEntry) -> None:
        digest, name = entry.metadata.get("sha256"), entry.metadata.get("name")
        if isinstance(digest, str):
            self._by_hash.setdefault(digest, entry.entry_id)
            if isinstance(name, str):
                self._by_name[name] = entry.entry_id

    def entries_for(self, node_id: str) -> list[InteractionEntry]:
        """Every entry of a node, oldest first (entries of nodes merged into it included)."""
        found = [self._entries[e] for e in self._node_to_entries.get(node_id, [])]
        return sorted(found, key=lambda e: e.timestamp)

    # --- appends: called only by graph_ops ---------------------------------------------------
    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Appends and re-links made inside the block are taken back if it raises, so the tree is exactly
        as it was; entries from before the block are never touched. Nested blocks join the outer one."""
        if self._journal is not None:
            yield
            return
        self._journal = journal = _Journal(len(self._entries))
        try:
            yield
        except BaseException:
            if len(self._entries) > journal.entries:
                for entry_id in list(self._entries)[journal.entries:]:
                    del self._entries[entry_id]
                self._by_hash, self._by_name = {}, {}
                for entry in self._entries.values():
                    self._index_document(entry)
            if journal.index is not None:
                self._node_to_entries = {k: list(v) for k, v in journal.index[0].items()}
                self._merge_events = list(journal.index[1])
            for node_id, before in journal.linked.items():
                if before is None:
                    self._node_to_entries.pop(node_id, None)
                else:
                    self._node_to_entries[node_id] = before
            raise
        finally:
            self._journal = None

    def _before_change(self) -> None:
        """Inside atomic(), before a change that may drop or move nodes' links: the whole index, kept once."""
        if self._journal is not None and self._journal.index is None:
            index = ({k: list(v) for k, v in self._node_to_entries.items()}, list(self._merge_events))
            self._journal.index = index

    def _before_link(self, node_id: str) -> None:
        """Inside atomic(), before an entry is linked to ``node_id``: that node's links alone, kept once (an add
        links a few nodes of a bank of thousands)."""
        journal = self._journal
        if journal is not None and journal.index is None and node_id not in journal.linked:
            before = self._node_to_entries.get(node_id)
            journal.linked[node_id] = None if before is None else list(before)

    def add_entry(self, entry: InteractionEntry, node_ids: list[str] = ()) -> None:
        if entry.entry_id in self._entries:
            raise TreeError(f"entry {entry.entry_id!r} already exists; entries are never replaced")
        self._entries[entry.entry_id] = entry
        self._index_document(entry)
        for node_id in node_ids:
            self.link(node_id, entry.entry_id)

    def link(self, node_id: str, entry_id: str) -> None:
        if entry_id not in self._entries:
            raise TreeError(f"no entry {entry_id!r} to link to node {node_id!r}")
        self._before_link(node_id)
        linked = self._node_to_entries.setdefault(node_id, [])
        if entry_id not in linked:
            linked.append(entry_id)

    def relink_merged(self, event: MergeEvent) -> None:
        """Point the merged nodes' entries at the new node and record the merge."""
        self._before_change()
        moved: list[str] = list(self._node_to_entries.get(event.new_node_id, []))
        for old in event.merged_node_ids:
            for entry_id in self._node_to_entries.pop(old, []):
                if entry_id not in moved:
                    moved.append(entry_id)
        if moved:
            self._node_to_entries[event.new_node_id] = moved
        self._merge_events.append(event)

    def unlink_node(self, node_id: str) -> list[str]:
        """Forget which entries belong to a node that left the graph (the entries stay)."""
        self._before_change()
        return self._node_to_entries.pop(node_id, [])

    # --- (de)serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": [e.model_dump(mode="json") for e in self._entries.values()],
            "node_to_entries": {k: list(v) for k, v in self._node_to_entries.items()},
            "merge_events": [m.model_dump(mode="json") for m in self._merge_events],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InteractionTree:
        tree = cls()
        for raw in data.get("entries", []):
            tree.add_entry(InteractionEntry.model_validate(raw))
        for node_id, entry_ids in dict(data.get("node_to_entries", {})).items():
            for entry_id in entry_ids:
                tree.link(str(node_id), entry_id)
        tree._merge_events = [MergeEvent.model_validate(m) for m in data.get("merge_events", [])]
        return tree

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InteractionTree):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None
