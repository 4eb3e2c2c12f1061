"""The engine: runs plans' rounds on the cores, and knows nothing of what a lock handle is.

What lives here: the executors' sync seam (:mod:`.executor`: the pool of cores, automatic
pipelining through :mod:`.combine`, releases not waited for in :mod:`.unwaited`), the steps a plan
yields (:mod:`.steps`), argument checks (:mod:`.checks`), tokens (:mod:`.tokens`), fork handling
(:mod:`.fork`) and the wake-on-release channels both front-ends share (:mod:`.wake`). It imports
:mod:`fastredlock.io`, :mod:`fastredlock.protocol` and the public leaves (``errors``, ``events``);
never a handle, a front-end or a tool.
"""
