"""The one error of the LM layer that users see."""


class LMConfigError(ValueError):
    """An LM spec that cannot be built: bad spec, missing file, missing optional dependency."""
