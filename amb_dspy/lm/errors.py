"""The one error of the LM layer that users see."""

from amb_dspy.errors import UserError


class LMConfigError(UserError, ValueError):
    """An LM spec that cannot be built: bad spec, missing file, missing optional dependency."""
