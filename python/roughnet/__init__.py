"""roughnet: real messaging stacks on emulated links, measured."""

__version__ = "0.1.0"
