"""The lock family's scripts load on a real master under the digests the client sends."""
from __future__ import annotations

from fastredlock.protocol import family


def test_script_digests_match_the_master(masters):
    for script in (family.RLOCK_ACQUIRE, family.RLOCK_RELEASE, family.RLOCK_EXTEND, family.PERMIT_RELEASE,
                   family.READ_ACQUIRE, family.READ_EXTEND, family.READ_RELEASE, family.WRITE_ACQUIRE):
        assert masters[0].command("SCRIPT", "LOAD", script) == family.sha_of(script)
