"""amb-dspy: an Agentic Memory Bank built on DSPy.

Heavy dependencies (torch, sentence-transformers, FAISS, DSPy) are imported by the modules that need
them, never here, so ``import amb_dspy`` and ``amb --help`` stay fast.
"""

__version__ = "0.1.0"
