"""The sans-I/O protocol: every rule of the Redlock engine, written once.

No sockets, threads, sleeps or clocks of its own (time is passed in), so it is tested from tables
without servers (``tests/protocol``). The modules are plain Python; the C build compiles them with
Cython (pure-Python mode, each ``.py`` augmented by its ``.pxd``) and the C I/O twin calls them as
C; the pure install interprets the same files. The I/O twins (``fastredlock.io.core_c`` and
``fastredlock.io.core_py``) own sockets only: each is a :class:`~.driver.Driver` that adds its I/O.

- :mod:`.outcomes`  per-master outcome codes and health counters
- :mod:`.scripts`   the Lua scripts (owner-checked release/extend, fencing, batches, turns)
- :mod:`.resp`      RESP encoding and the reply guard (what a lock client accepts from a master)
- :mod:`.replies`   command kinds and what a reply means for each (classification)
- :mod:`.handshake` what a new connection sends first, and what its answers mean (INFO parsing)
- :mod:`.voting`    restart-aware voting: when a master's OK does not count
- :mod:`.health`    per-master counters and cool-downs
- :mod:`.result`    a round's result (:class:`~.result.Round`: outcomes, validity, ``valid_until``)
- :mod:`.link`      one master's connection state: what it must send, what it still owes
- :mod:`.session`   one core's round state machine over its links (start, feed, expire, finish)
- :mod:`.driver`    what a core does around its I/O, once for both twins: the round's drive (wait,
  serve, expire, finish, tidy), the caller-driven round (asyncio), settling, the core's state
- :mod:`.cluster`   Redis Cluster: slots, the slot map, routing a round's commands to nodes
- :mod:`.sentinel`  Sentinel: asking the sentinels for a master's address, and what they answer
- :mod:`.plans`     the Redlock algorithm's decisions above one round (cleanup, fencing,
  extend-or-lose, renewal verdict, what an inspection's reads say)
- :mod:`.family`    the lock family's scripts, keys and steps (reentrant, read-write, semaphore)

The lock operations themselves (acquire with its retries, release, extend...) are plans over these
rounds, in :mod:`fastredlock.handles.lock`.
"""
