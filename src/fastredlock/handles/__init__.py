"""The handles' shared half: state and plans that the sync and the asyncio front-ends both drive.

What lives here: :class:`~.lock.LockBase` (a lock handle's state and every plain-lock plan), the lock
family's plans with :class:`~.family.RWLock` and :class:`~.family.RLockBase` (:mod:`.family`), the
batch operations' plans (:mod:`.batch`), the watchdog's decisions and its entry record
(:mod:`.watchdog`), the client base (:mod:`.client`) and what ``inspect``
returns (:mod:`.lockinfo`). It imports :mod:`fastredlock.engine`, :mod:`fastredlock.io`,
:mod:`fastredlock.protocol` and the public leaves; never :mod:`fastredlock.sync` nor
:mod:`fastredlock.asyncio`.
"""
