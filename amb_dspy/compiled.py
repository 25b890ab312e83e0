"""The old name of :mod:`amb_dspy.agents.compiled` (compiled agents on disk), kept for users who import
``amb_dspy.compiled`` (docs/reference.md names ``amb_dspy.compiled.CompiledError``).

The name is bound to the module itself rather than to a copy of its names, so ``amb_dspy.compiled`` *is*
``amb_dspy.agents.compiled``: patching an attribute on either name changes the one module.
"""

import sys

from amb_dspy.agents import compiled as _compiled

sys.modules[__name__] = _compiled
