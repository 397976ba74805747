"""ccsynth.bench"""
