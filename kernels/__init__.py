"""ccsynth.kernels"""
