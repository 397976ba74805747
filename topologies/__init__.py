"""ccsynth.topologies"""
