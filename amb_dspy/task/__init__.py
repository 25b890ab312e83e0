"""One task: its session (what it owns), the loop that runs on it, and the parts they use.

========================  ==============================================================================
module                    what it holds
========================  ==============================================================================
``session``               :class:`TaskSession`: holds the task's memory; its tool journal, meter, progress;
                          checkpoint (``save``/``load``); the outside interface
``memory``                :class:`TaskMemory`: the task's memory, its parts (store, state, runner, writer,
                          adapter, tool cache) built in one place, and the operations the loop and outside
                          agents share (tool results into memory, plan, conflicts, recall, remember)
``loop``                  :class:`TaskLoop`: the spec's loop over a session and an executor
``answering``             the answer agent's two places in the loop (the fast path, the last answer)
``checkpoint``            the checkpoint file of a task
``journal``               the tool journal: every tool response, as it returns, for resume
``images``                the task's images, from the user's files to stored attachments
``state``                 the run state, its progress events and the input a run accepts
``result``                what a task hands back (:class:`RunResult`, :class:`IngestResult`), holding its store
                          to save (``result.export``); :class:`RunInterrupted`
``ingest``                :class:`DocumentIngest`: the one owner of ingesting documents into a bank, their usage
                          summed
``worker``                one request at a time per task, on the task's own thread
``inputs``                what a session accepts from outside, checked at the door
``tools``                 the one table of memory tools every door (MCP, dspy, PydanticAI, LangGraph) wraps
========================  ==============================================================================

Nothing is imported here, so ``import amb_dspy.task.state`` stays light.
"""
