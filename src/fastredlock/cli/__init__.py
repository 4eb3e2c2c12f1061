"""The command line (``fastredlock`` / ``python -m fastredlock``): run, audit, inspect, demo and the
bench launcher. :func:`~.main.main` parses; :mod:`.run` runs a command under a lock; :mod:`.audit`
checks masters. Tools stand on the public API and the io layer; nothing below imports them.
"""
from .main import main

__all__ = ["main"]
