"""The C encoder (``io/encode_c``) writes exactly the protocol's RESP bytes for the commands it
writes straight (the plain lock's SET and release), and EVAL fallbacks derived from them."""
import pytest

from fastredlock.protocol.resp import encode_command
from fastredlock.protocol.scripts import (
    QUIET, RELEASE, RELEASE_CLUSTER, RELEASE_CLUSTER_SHA, RELEASE_FULL, RELEASE_FULL_SHA, RELEASE_SHA, RELEASE_TAGGED,
    RELEASE_TAGGED_SHA,
)

# lengths on both sides of each digit count (the encoder writes numbers below 1000 its own way)
KEYS = [b"k", b"x" * 9, b"x" * 10, b"y" * 99, b"y" * 100, b"z" * 999, b"z" * 1000, b"{a}" + b"z" * 120]
TOKENS = [b"t", b"0123456789" * 3, b"q" * 100]
TTLS = [0, 1, 9, 10, 99, 100, 101, 999, 1000, 1001, 9999, 10000, 10010, 99999, 100000, 123456, 1234567, 2 ** 40,
        2 ** 63 - 1]


@pytest.fixture
def command_bytes():
    from fastredlock import CORE
    if CORE != "cython":
        pytest.skip("the C build is not active")
    from fastredlock.io.encode_c import command_bytes
    return command_bytes


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("token", TOKENS)
def test_the_c_encoder_writes_the_protocols_set(command_bytes, key, token):
    for ttl in TTLS:
        payload, fallbacks = command_bytes("acquire", key, token, ttl)
        assert payload == encode_command(b"SET", key, token, b"NX", b"PX", b"%d" % ttl)
        assert fallbacks is None


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("token", TOKENS)
def test_the_c_encoder_writes_the_protocols_releases(command_bytes, key, token):
    for script, sha, text in ((RELEASE, RELEASE_SHA, RELEASE), (RELEASE_TAGGED, RELEASE_TAGGED_SHA, RELEASE_TAGGED),
                              (RELEASE_CLUSTER, RELEASE_CLUSTER_SHA, RELEASE_CLUSTER),
                              (None, RELEASE_FULL_SHA, RELEASE_FULL)):
        payload, fallbacks = command_bytes("release", key, token, script)
        assert payload == encode_command(b"EVALSHA", sha, b"1", key, token)
        assert fallbacks == [encode_command(b"EVAL", text, b"1", key, token)]
    payload, fallbacks = command_bytes("release_quiet", key, token)
    assert payload == encode_command(b"EVALSHA", RELEASE_FULL_SHA, b"1", key, token, QUIET)
    assert fallbacks == [encode_command(b"EVAL", RELEASE_FULL, b"1", key, token, QUIET)]
