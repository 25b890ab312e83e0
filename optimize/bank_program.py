"""The whole memory bank as a DSPy program, for compiling the agents that only the final answer can judge.

The planning agent has no labelled output of its own in HotpotQA: what it gets right shows in the
bank's answer. :class:`BankQA` runs a fresh :class:`~amb_dspy.bank.MemoryBank` per question and returns
its answer, and exposes only the agents being compiled as sub-modules, so an optimizer sees (and
changes) their predictors alone; the other agents run as they are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.agents.base import Borrowed
from amb_dspy.config import AmbConfig


class BankQA(dspy.Module):
    """``question, context -> answer`` through a fresh memory bank per call.

    ``trainable`` agents are sub-modules (their predictors are this program's parameters); ``fixed``
    agents are used as they are. The bank is built with the LM configured at call time, so an
    optimizer's teacher settings reach every agent.
    """

    def __init__(
        self,
        trainable: Mapping[str, dspy.Module],
        fixed: Mapping[str, dspy.Module],
        config: AmbConfig,
        *,
        embedder: Any = None,
        corpus: Any = None,
    ):
        super().__init__()
        self.trainable = dict(trainable)
        self._fixed = Borrowed(dict(fixed))
        self._workdir = Borrowed(tempfile.TemporaryDirectory(prefix="amb-bankqa-"))
        root = Path(self._workdir.value.name)
        self._config = Borrowed(config.model_copy(update={"storage_dir": root / "storage", "temp_dir": root / "temp"}))
        self._embedder = Borrowed(embedder)
        self._corpus = Borrowed(corpus)

    @property
    def agents(self) -> dict[str, dspy.Module]:
        return {**self._fixed.value, **self.trainable}

    def forward(self, question: str, context: str = "") -> dspy.Prediction:
        from amb_dspy.bank import MemoryBank

        bank = MemoryBank(
            self._config.value,
            lm=dspy.settings.lm,
            agents=self.agents,
            embedder=self._embedder.value,
            corpus=self._corpus.value,
        )
        try:
            result = bank.run(task=question, context=context)
        finally:
            # The bank meters its LMs with a callback; the LM outlives this bank, its meter must not.
            for lm in bank.lms.all():
                lm.callbacks[:] = [c for c in lm.callbacks if c is not bank.meter]
        return dspy.Prediction(answer=result.answer, termination=result.termination, errors=list(result.errors))
