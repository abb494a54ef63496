"""The one exception type for bad user input (paths, maps, dictionaries, corpora)."""


class DistillError(ValueError):
    """Raised with a message that names the bad value and what would be valid."""
