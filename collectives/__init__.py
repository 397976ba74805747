"""ccsynth.collectives"""
