"""The memory bank as a DSPy program, to put inside your own program, optimise and save.

.. code-block:: python

    qa = MemoryBankQA()                                   # all five agents trainable
    answer = qa(question="...", context=long_text).answer
    compiled = dspy.BootstrapFewShot(metric=my_metric).compile(qa, trainset=examples)
    compiled.save("bank_qa.json"); MemoryBankQA().load("bank_qa.json")
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.agents import AGENT_CLASSES
from amb_dspy.agents.base import Borrowed
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig


class MemoryBankQA(dspy.Module):
    """``question, context -> answer``, each call a task of its own (fresh, task-scoped memory) on one bank.

    The bank runs on the LM DSPy is configured with when it is called (``dspy.configure`` /
    ``dspy.context``, so an optimizer's teacher settings reach every agent), else on the LM its config
    names. Its parameters are the predictors of the ``trainable`` agents (names, or agent modules by
    name; all five by default): they are what DSPy optimizers tune and what ``save``/``load`` write and
    read. Other agents are used as they are. Each call's storage lives in a temporary folder of its own.
    """

    def __init__(
        self,
        config: AmbConfig | None = None,
        *,
        trainable: Iterable[str] | Mapping[str, dspy.Module] | None = None,
        fixed: Mapping[str, dspy.Module] | None = None,
        embedder: Any = None,
        corpus: Any = None,
    ):
        super().__init__()
        config = config or AmbConfig()
        if trainable is None:
            trainable = list(AGENT_CLASSES)
        if not isinstance(trainable, Mapping):
            trainable = {name: AGENT_CLASSES[name](config) for name in trainable}
        self.trainable = dict(trainable)
        fixed = dict(fixed or {})
        for name, cls in AGENT_CLASSES.items():
            if name not in self.trainable and name not in fixed:
                fixed[name] = cls(config)
        self._fixed = Borrowed(fixed)
        self._workdir = Borrowed(tempfile.TemporaryDirectory(prefix="amb-bankqa-"))
        root = Path(self._workdir.value.name)
        self._config = Borrowed(config.model_copy(update={"storage_dir": root / "storage", "temp_dir": root / "temp"}))
        self._embedder = Borrowed(embedder)
        self._corpus = Borrowed(corpus)
        self._banks: Borrowed = Borrowed({})  # the banks of this module and its copies, by their agents

    def _bank(self) -> MemoryBank:
        """The bank for this module's agents, built at its first call and reused (a copy made by an
        optimizer has agents of its own, so a bank of its own)."""
        agents = self.agents
        key = tuple(sorted((name, id(agent)) for name, agent in agents.items()))
        bank = self._banks.value.get(key)
        if bank is None or any(bank.agents.get(name) is not agent for name, agent in agents.items()):
            bank = MemoryBank(self._config.value, agents=agents, embedder=self._embedder.value, corpus=self._corpus.value)
            self._banks.value[key] = bank
        return bank

    @property
    def agents(self) -> dict[str, dspy.Module]:
        return {**self._fixed.value, **self.trainable}

    def forward(self, question: str, context: str = "") -> dspy.Prediction:
        result = self._bank().run(task=question, context=context)
        return dspy.Prediction(answer=result.answer, termination=result.termination, errors=list(result.errors))
