"""ccsynth.collectives"""

__all__: list[str] = []
