"""ccsynth.synth"""

__all__: list[str] = []
