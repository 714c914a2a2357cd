"""Synthetic streaming-ML traffic: instances, evolving predictions of several models, late
labels, drift — to files for ``streameval replay`` or to the input topics."""
