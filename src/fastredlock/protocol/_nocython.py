"""The stand-in of :mod:`.nocython` under its earlier name (the protocol's modules import it so)."""
from .nocython import cython

__all__ = ["cython"]
