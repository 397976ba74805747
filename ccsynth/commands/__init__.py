"""Sub-commands of the ``ccsynth`` CLI, one module each (see ccsynth/cli.py)."""

__all__: list[str] = []
