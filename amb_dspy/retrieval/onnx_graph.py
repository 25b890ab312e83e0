"""The exported model's graph without its padding mask, for runs of one text with no padding (the int8 model's).

torch's export of the attention (``scaled_dot_product_attention``) builds, in every layer, an additive mask from
``attention_mask`` (``Where(mask, 0, -inf)``), adds it to the attention scores, and after the softmax replaces the
NaN of a fully masked row by 0 (``IsNaN`` + ``Where``). A text run alone has no padding: its mask is all ones, the
added mask is all zeros and no row is masked, so these steps change no value, and they cost time: about a fifth of
an int8 run of a HotpotQA paragraph on one core (9,300 -> 11,500 tokens/s). :func:`drop_padding_mask` takes them
out. Its vectors are bit-identical to the full graph's for every unpadded input (the model's maker checks that on
texts of several lengths before it keeps an edited graph) and wrong for a padded batch, so a model edited here
must only ever run one text a call (``OnnxEmbedder`` at int8 does).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def drop_padding_mask(model) -> int:
    """Remove the padding mask's steps from ``model`` (an ``onnx.ModelProto``, edited in place): the additions of
    the mask made from ``attention_mask`` (:func:`_is_zero_mask`) and the NaN guards after softmaxes.
    The nodes only they used go too. Returns how many of the two steps were taken out (0: the graph is left as
    it was, still right, only slower)."""
    graph = model.graph
    made_by = {output: node for node in graph.node for output in node.output}
    constants = _constant_values(graph)
    inputs = {value.name for value in graph.input}
    replaced: dict[str, str] = {}
    for node in graph.node:
        if node.op_type == "Where" and _is_nan_guard(node, made_by):
            replaced[node.output[0]] = node.input[2]  # the softmax's own output
        elif node.op_type == "Add" and len(node.input) == 2:
            masks = [name for name in node.input if _is_zero_mask(name, made_by, constants, inputs)]
            if len(masks) == 1:
                replaced[node.output[0]] = next(name for name in node.input if name not in masks)
    if not replaced:
        return 0
    for node in graph.node:
        for position, name in enumerate(node.input):
            while name in replaced:
                name = replaced[name]
            node.input[position] = name
    _drop_unused(graph)
    return len(replaced)


def _is_nan_guard(where, made_by: dict) -> bool:
    """``Where(IsNaN(x), c, x)`` with ``x`` a softmax's output: no value of an unmasked softmax is NaN."""
    guard = made_by.get(where.input[0])
    softmax = made_by.get(where.input[2])
    return (guard is not None and guard.op_type == "IsNaN" and guard.input[0] == where.input[2]
            and softmax is not None and softmax.op_type == "Softmax")


def _is_zero_mask(name: str, made_by: dict, constants: dict[str, np.ndarray], inputs: set[str]) -> bool:
    """Whether ``name`` is the additive padding mask: ``Where(condition, 0, -inf)`` (or another large negative),
    its condition computed from ``attention_mask``. Where every position is attended, it is 0 throughout: the
    caller checks that on real runs before it keeps the edited graph (:func:`drop_padding_mask` only matches)."""
    where = made_by.get(name)
    if where is None or where.op_type != "Where":
        return False
    attended, masked = constants.get(where.input[1]), constants.get(where.input[2])
    return (attended is not None and masked is not None and not np.any(attended) and bool(np.all(masked <= -1e4))
            and "attention_mask" in _values_behind(where.input[0], made_by) & inputs)


def _values_behind(name: str, made_by: dict) -> set[str]:
    """The values with no producing node (graph inputs, initializers) that a value is computed from."""
    found: set[str] = set()
    seen: set[str] = set()
    pending = [name]
    while pending:
        value = pending.pop()
        if value in seen or not value:
            continue
        seen.add(value)
        node = made_by.get(value)
        if node is None:
            found.add(value)
        else:
            pending.extend(node.input)
    return found


def _constant_values(graph) -> dict[str, np.ndarray]:
    """The values of the graph's ``Constant`` nodes and initializers, by name."""
    from onnx import numpy_helper

    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                values[node.output[0]] = numpy_helper.to_array(value)
    return values


def _drop_unused(graph) -> None:
    """Remove the nodes whose outputs nothing uses (repeatedly) and the initializers no node reads."""
    outputs = {output.name for output in graph.output}
    while True:
        used = outputs | {name for node in graph.node for name in node.input}
        dead = [node for node in graph.node if not any(output in used for output in node.output)]
        if not dead:
            break
        _remove(graph.node, dead)
    used = {name for node in graph.node for name in node.input}
    _remove(graph.initializer, [init for init in graph.initializer if init.name not in used])


def _remove(container, items: Iterable) -> None:
    for item in list(items):
        container.remove(item)
