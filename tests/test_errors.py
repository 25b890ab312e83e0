"""One error root: every exception class amb_dspy defines is an AmbError, and the built-in bases callers
catch (ValueError, RuntimeError, TimeoutError) are kept."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import amb_dspy
from amb_dspy.errors import AmbError, InputError, UserError

# A stop signal, not an error: a BaseException so that it passes through the `except Exception` of DSPy's
# callback runner, ReAct's tool loop and the agents (see amb_dspy.errors).
# Stops, not errors: the LM call cap, and an interrupted run carrying its memory (a KeyboardInterrupt, so that
# every `except KeyboardInterrupt` still sees Ctrl-C)
OUTSIDE_ON_PURPOSE = {"amb_dspy.lm.usage.LMCallCapReached", "amb_dspy.task.result.RunInterrupted"}


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for module_info in pkgutil.walk_packages(amb_dspy.__path__, prefix="amb_dspy."):
        try:
            module = importlib.import_module(module_info.name)
        except ImportError as exc:  # an optional extra that is not installed here
            if not (exc.name or "").startswith("amb_dspy"):
                continue
            raise
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_every_exception_class_in_amb_dspy_is_under_the_one_root():
    classes = _exception_classes()
    assert len(classes) >= 25 and OUTSIDE_ON_PURPOSE <= set(classes)
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, AmbError))
    assert outside == sorted(OUTSIDE_ON_PURPOSE)
    assert not issubclass(classes["amb_dspy.lm.usage.LMCallCapReached"], Exception)


@pytest.mark.parametrize(("name", "bases"), [
    ("amb_dspy.errors.InputError", (UserError, ValueError)),
    ("amb_dspy.errors.ConfigError", (UserError, ValueError)),
    ("amb_dspy.storage.bank_file.BankFileError", (UserError, ValueError)),
    ("amb_dspy.lm.errors.LMConfigError", (UserError, ValueError)),
    ("amb_dspy.retrieval.embedding_base.EmbeddingError", (UserError, RuntimeError)),
    ("amb_dspy.longterm.errors.LongTermInputError", (UserError, ValueError)),
    ("amb_dspy.longterm.errors.StoreUnavailableError", (UserError,)),
    ("amb_dspy.agents.compiled.CompiledError", (UserError,)),
    ("amb_dspy.tools.corpus_files.CorpusError", (UserError, ValueError)),
    ("amb_dspy.view.trace.TraceError", (UserError, ValueError)),
    ("amb_dspy.task.tools.ToolFailure", (UserError,)),
    ("amb_dspy.storage.query_graph.GraphError", (AmbError, ValueError)),
    ("amb_dspy.tools.netguard.URLRefused", (AmbError, ValueError)),
    ("amb_dspy.tools.netguard.ResolutionTimeout", (AmbError, TimeoutError)),
    ("amb_dspy.tools.types.SearchError", (AmbError, RuntimeError)),
])
def test_each_class_keeps_the_bases_its_callers_catch(name, bases):
    module, _, cls = name.rpartition(".")
    error = getattr(importlib.import_module(module), cls)
    assert all(issubclass(error, base) for base in bases)


def test_internal_errors_are_not_user_errors():
    from amb_dspy.agents.base import AgentError
    from amb_dspy.storage.interaction_tree import TreeError

    assert not issubclass(AgentError, UserError) and not issubclass(TreeError, UserError)
    assert issubclass(InputError, UserError)
