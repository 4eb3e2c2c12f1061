"""``python -m fastredlock``: see :mod:`fastredlock.cli`."""
import sys

from .cli import main

sys.exit(main())
