"""ccsynth.synth"""
