"""``python -m fastredlock``: see :mod:`fastredlock.cli.main`."""
import sys

from .cli.main import main

sys.exit(main())
