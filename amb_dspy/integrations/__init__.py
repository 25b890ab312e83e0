"""Memory tools for agent frameworks, thin and on one :class:`~amb_dspy.task.session.TaskSession`:

* :mod:`.dspy_tools` -- ``dspy.Tool`` objects for any ``dspy.ReAct`` (and a wrapper that observes its tools);
* :mod:`.pydantic_ai` -- a PydanticAI agent whose system prompt is the session's context and whose every
  tool result is observed (``pip install 'amb-dspy[pydantic-ai]'``);
* :mod:`.langgraph` -- LangGraph tools and a node that observes tool messages (``pip install 'amb-dspy[langgraph]'``).

Each module imports its framework only when used.
"""
