"""streameval: online evaluation of streaming classifiers on Kafka."""

__version__ = "0.1.0"
