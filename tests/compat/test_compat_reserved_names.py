"""The shims refuse a lock name that is another lock's derived key, as the library does
(tests/engine/test_reserved_names.py)."""
from __future__ import annotations

import pytest


def test_shims_refuse(one_shim_core, masters, name):
    from fastredlock.compat import pottery, redlock_py
    import redis

    dicts = [{"host": "127.0.0.1", "port": m.port} for m in masters]
    with pytest.raises(ValueError, match="reserved"):
        redlock_py.Redlock(dicts).lock(f"{{{name}}}:wake", 1000)
    clients = [redis.Redis(host="127.0.0.1", port=m.port) for m in masters]
    try:
        # pottery keys are "redlock:<key>": its lock "{x}:wake" is the wake mark of "redlock:{x}"
        with pytest.raises(ValueError, match="reserved"):
            pottery.Redlock(key=f"{{{name}}}:wake", masters=clients).acquire(blocking=False)
    finally:
        for c in clients:
            c.close()
