"""ccsynth.synth.baselines"""
