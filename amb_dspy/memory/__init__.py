"""A task's memory: the three layers kept together, written and shown.

==========================  ============================================================================
module                      what it holds
==========================  ============================================================================
``graph_ops``               :class:`MemoryStore`: the only place that mutates the graph, the tree and the
                            indexes, together (transactions); it saves and opens them (``bank_io``:
                            ``save``, the save every door uses, and ``export``)
``writer``                  :class:`MemoryWriter`: memory conversion (classify -> structure -> analyse),
                            merges after cross-validation, documents added to a bank
``written``                 what the writer takes and returns as plain values (``ToolResponse``,
                            ``Conflict``, ``Written``): it knows no task
``conversion_budget``       what one observation may cost: the passages converted, the rest kept raw
``view``                    what ``<memory>`` shows at a token budget (summaries, or evidence lines)
``dates``                   relative dates resolved against a line's date, at ingest
==========================  ============================================================================

Nothing is imported here, so ``import amb_dspy.memory.dates`` stays light.
"""
