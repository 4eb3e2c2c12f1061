"""The comparison benchmark, shipped in the package: ``python -m fastredlock bench [--quick]``.

``driver`` starts local masters, installs each peer client into its own folder and runs every
configuration x scenario in a fresh process (``worker``, run as a script so that a peer's process
imports nothing of fastredlock); ``floor`` builds and runs the C floor (``floor.c``) beside them.
Needs ``pip install "fastredlock[bench]"`` (a Redis server comes with its ``server`` extra, or from
PATH) and a C compiler for the floor (skipped, with the reason, without one).
"""
