"""Enqueue one task many times from a process of its own, at the same instant as its peers.

argv[1]: JSON ``{"task", "args", "count", "queue", "barrier", "parties"}``: each process counts
itself in under the probe key ``barrier`` and starts once ``parties`` processes have; the app's
configuration is in ``FRL_CELERY`` (see _celery_app.py). Prints one JSON line:
``{"ids": [...accepted task ids...], "refused": n, "core": fastredlock.CORE or null}``."""
import json
import sys
import time

import _celery_app

spec = json.loads(sys.argv[1])
tasks = _celery_app.tasks
task = getattr(tasks, spec["task"].replace(".", "_"))
ids, refused = [], 0
probe = tasks.probe
probe.incr(spec["barrier"])
deadline = time.monotonic() + 30
while int(probe.get(spec["barrier"]) or 0) < spec["parties"] and time.monotonic() < deadline:
    time.sleep(0.005)
for _ in range(spec["count"]):
    try:
        result = task.apply_async(args=spec["args"], queue=spec["queue"])
    except (tasks.AlreadyQueued, tasks.DuplicateTaskError):
        refused += 1
        continue
    if result.id is None:  # celery-once's graceful refusal (an EagerResult without id)
        refused += 1
    else:
        ids.append(result.id)
try:
    import fastredlock
    core = fastredlock.CORE if tasks.impl == "shim" else None
except ImportError:
    core = None
print(json.dumps({"ids": ids, "refused": refused, "core": core}))
