"""amb-dspy: an Agentic Memory Bank built on DSPy.

Heavy dependencies (torch, sentence-transformers, FAISS, DSPy) are imported by the modules that need
them, never here, so ``import amb_dspy`` and ``amb --help`` stay fast.
"""

__version__ = "0.1.0"

from amb_dspy.config.environment import prefer_passive_openmp as _prefer_passive_openmp

_prefer_passive_openmp()  # before torch or llama.cpp is imported


def __getattr__(name: str):
    # amb_dspy.MemoryBank, TaskSession, AmbConfig, MemoryBankQA and load_agents without importing DSPy at
    # `import amb_dspy`: each is imported on first use.
    if name == "AmbConfig":
        from amb_dspy.config import AmbConfig

        return AmbConfig
    if name == "MemoryBank":
        from amb_dspy.bank import MemoryBank

        return MemoryBank
    if name == "TaskSession":
        from amb_dspy.task.session import TaskSession

        return TaskSession
    if name == "load_agents":
        from amb_dspy.agents.compiled import load_agents

        return load_agents
    if name == "MemoryBankQA":  # the bank as a DSPy module (see amb_dspy.program)
        from amb_dspy.program import MemoryBankQA

        return MemoryBankQA
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
