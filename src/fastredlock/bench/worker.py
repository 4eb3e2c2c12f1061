"""One benchmark measurement in its own process: ``python [-S] worker.py '<job as JSON>'``.

The comparison driver (:mod:`.driver`) starts a fresh interpreter running this file for every
configuration x scenario x round. It talks JSON lines on stdout (``{"event": "ready"}``,
``{"event": "result", ...}``, ``{"event": "error", ...}``) and waits for a ``go`` line on stdin
where a scenario needs the driver to act first (contention start, fault injection).

Peers run with ``python -S`` and a ``PYTHONPATH`` holding nothing but their own
``pip install --target`` folder, so each one sees exactly the redis-py (and the rest) that it
pinned. This file and its siblings (:mod:`.control`, :mod:`.measure`, :mod:`.adapters`,
:mod:`.scenarios`) therefore import only the standard library at the top, and import each other as
top-level modules of this folder when run as a script (``sys.path[0]`` is this folder), or
relatively when imported from the package.
"""
from __future__ import annotations

import json
import os
import sys

if __package__:
    from .adapters import ADAPTERS, Runner, versions
    from .control import emit, err_name
    from .scenarios import SCENARIOS
else:  # a worker process: this folder is sys.path[0]
    from adapters import ADAPTERS, Runner, versions  # type: ignore[no-redef]
    from control import emit, err_name  # type: ignore[no-redef]
    from scenarios import SCENARIOS  # type: ignore[no-redef]

__all__ = ["main"]


def main() -> None:
    job = json.loads(sys.argv[1])
    cls = ADAPTERS[job["config"]]
    try:
        run = Runner(cls, job["urls"], job["ttl"])
        mod = sys.modules.get(getattr(cls, "module", ""))
        info = {
            "versions": versions(cls),
            "module_file": getattr(mod, "__file__", None),
            "python": sys.version.split()[0],
        }
        if job["scenario"] == "probe":
            h = run.acquire(f"probe:{job['tag']}")
            if h is None:
                raise RuntimeError("could not take an uncontended lock on healthy masters")
            run.release(h)
            emit({"event": "result", "info": info, "result": {}})
        else:
            result = SCENARIOS[job["scenario"]](run, job)
            emit({"event": "result", "info": info, "result": result})
        run.close()
    except BaseException as exc:  # report, never hang the driver
        import traceback

        emit({"event": "error", "error": f"{err_name(exc)}: {exc}",
              "traceback": traceback.format_exc()[-2000:]})
    finally:
        sys.stdout.flush()
        os._exit(0)  # leave stuck library threads (and their executors) behind


if __name__ == "__main__":
    main()
