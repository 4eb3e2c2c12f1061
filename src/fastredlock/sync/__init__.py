"""The sync front-end: :class:`~.client.Redlock`, :class:`~.lock.Lock`, the lock family's classes, the
watchdog thread and the wake-on-release notifier thread.

Users import these from :mod:`fastredlock`. This package drives the plans of
:mod:`fastredlock.handles` with blocking waits; it never imports :mod:`fastredlock.asyncio`, which
mirrors it.
"""
