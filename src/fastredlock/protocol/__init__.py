"""The sans-I/O protocol: every rule of the Redlock engine, written once.

No sockets, threads, sleeps or clocks of its own (time is passed in), so it is tested from tables
without servers (``tests/protocol``). The modules are plain Python; the C build compiles them with
Cython (pure-Python mode, each ``.py`` augmented by its ``.pxd``) and the C I/O twin calls them as
C; the pure install interprets the same files. The I/O twins (``fastredlock._io_c`` and
``fastredlock._io_py``) own sockets only and drive these objects.

- :mod:`.outcomes`  per-master outcome codes and health counters
- :mod:`.scripts`   the Lua scripts (owner-checked release/extend, fencing, batches)
- :mod:`.resp`      RESP encoding and the reply guard (what a lock client accepts from a master)
- :mod:`.replies`   command kinds and what a reply means for each (classification)
- :mod:`.handshake` what a new connection sends first, and what its answers mean (INFO parsing)
- :mod:`.voting`    restart-aware voting: when a master's OK does not count
- :mod:`.health`    per-master counters and cool-downs
- :mod:`.rounds`    a round's result (validity, ``valid_until``) and the owed-reply rules
- :mod:`.plans`     the Redlock algorithm's decisions above one round (cleanup, fencing,
  extend-or-lose, renewal verdict, what an inspection's reads say)
"""
