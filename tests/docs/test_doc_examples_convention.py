"""The example finder itself: the directives, the port rewriting and the failure of a bad block."""
from __future__ import annotations

from pathlib import Path

import pytest

from _doc_examples import DEFAULT_MASTERS, examples_in


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_examples_in_reads_directives_and_skips_other_languages(tmp_path):
    path = _write(tmp_path, (
        "text\n\n```bash\necho no\n```\n\n"
        "<!-- example: masters=5 -->\n```python\nprint(1)\n```\n\n"
        "<!-- fragment: needs a deployment -->\n```python\nprint(2)\n```\n\n"
        "```python\nprint(3)\n```\n"
    ))
    found = list(examples_in(path))
    assert [e.code for e in found] == ["print(1)\n", "print(2)\n", "print(3)\n"]
    assert [e.masters for e in found] == [5, DEFAULT_MASTERS, DEFAULT_MASTERS]
    assert [e.fragment for e in found] == [None, "needs a deployment", None]


def test_examples_in_reads_blocks_indented_in_a_list(tmp_path):
    path = _write(tmp_path, "- item\n\n    ```python\n    x = 1\n    ```\n")
    assert [e.code for e in examples_in(path)] == ["x = 1\n"]


def test_bind_rewrites_ports_7001_to_7009_only(tmp_path):
    path = _write(tmp_path, '```python\nu = ["redis://127.0.0.1:7001", ("127.0.0.1", 7002)]; p = 17001; q = 7001.5\n```\n')
    (example,) = examples_in(path)
    assert example.bind([40001, 40002]) == 'u = ["redis://127.0.0.1:40001", ("127.0.0.1", 40002)]; p = 17001; q = 7001.5\n'


def test_bind_refuses_a_port_beyond_the_masters_asked_for(tmp_path):
    path = _write(tmp_path, '```python\nu = "redis://127.0.0.1:7004"\n```\n')
    (example,) = examples_in(path)
    with pytest.raises(LookupError, match="only 3 masters"):
        example.bind([1, 2, 3])


@pytest.mark.parametrize("directive", ["<!-- example: masters=0 -->", "<!-- example: nodes=2 -->", "<!-- fragment -->"])
def test_examples_in_refuses_a_bad_directive(tmp_path, directive):
    path = _write(tmp_path, f"{directive}\n```python\npass\n```\n")
    with pytest.raises(ValueError):
        list(examples_in(path))


def test_examples_in_refuses_an_unclosed_fence(tmp_path):
    path = _write(tmp_path, "```python\npass\n")
    with pytest.raises(ValueError, match="unclosed"):
        list(examples_in(path))


def test_examples_fit_the_masters_age():
    """Every example on the test's masters uses TTLs of at most MAX_EXAMPLE_TTL, so that it runs with
    the library's defaults (restart-aware voting on) on masters up for longer than that."""
    from _doc_examples import MAX_EXAMPLE_TTL, all_examples, ttls_of, uses_shared_masters

    too_long = [(e.id, max(ttls_of(e.code))) for e in all_examples()
                if e.fragment is None and uses_shared_masters(e) and ttls_of(e.code)
                and max(ttls_of(e.code)) > MAX_EXAMPLE_TTL]
    assert not too_long, (f"examples with a TTL above {MAX_EXAMPLE_TTL} s on the test's masters (lower it, start "
                          f"masters in the example, or write restart_aware=False in it): {too_long}")


def test_ttls_of_reads_the_units():
    from _doc_examples import ttls_of

    assert ttls_of('dlm.lock("a", ttl=10.0); x.extend(20); RedLock("b", ttl=10000); dlm.lock("c", 1000)') == [
        10.0, 20.0, 10.0, 1.0]
