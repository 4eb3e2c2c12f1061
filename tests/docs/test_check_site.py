"""The browser check of the built site (tests/docs/check_site.py) passes a good page and fails on a
planted broken image, a planted overflowing code block and a planted script from another host, in
real headless chromium.

It needs chromium (Debian: `apt-get install chromium`). `.ci/run` installs it and sets
``FASTREDLOCK_REQUIRE_CHROMIUM=1``, so that there a missing browser fails instead of skipping the
check unnoticed; elsewhere (a newcomer's machine) the test is skipped, saying why.
"""
from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

import check_site  # tests/docs is on pytest's pythonpath (pyproject.toml)

# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
pre {{ width: 600px; overflow: auto; white-space: pre; }}</style></head>
<body><h1>page</h1>{body}</body></html>"""


@pytest.fixture(scope="module")
def chromium():
    binary = check_site.find_chromium()
    if binary is None:
        why = "chromium is not installed (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("FASTREDLOCK_REQUIRE_CHROMIUM", "") not in ("", "0"):
            pytest.fail(why)
        pytest.skip(why)
    return binary


def _site(root: Path, pages: dict) -> Path:
    (root / "img").mkdir(parents=True)
    (root / "img" / "ok.png").write_bytes(PIXEL)
    for rel, body in pages.items():
        path = root / rel / "index.html" if rel else root / "index.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PAGE.format(body=body))
    return root


def test_planted_site(tmp_path, chromium):
    """One run over a planted site: the good page passes, each planted defect is reported on its page."""
    site = _site(tmp_path / "site", {
        "": '<img src="/img/ok.png"><pre><code>short = "line"</code></pre>',
        "broken-image": '<img src="/img/missing.png">',
        "not-an-image": '<img src="/index.html">',
        "wide-code": "<pre><code>" + "x = 1  # " + "long " * 60 + "</code></pre>",
        "other-host": '<img src="/img/ok.png"><script src="https://example.invalid/x.js"></script>',
        "wrapped-code": '<pre style="white-space: pre-wrap"><code>' + "long " * 60 + "</code></pre>",
    })
    results = check_site.check(site, chromium, timeout=60)
    assert results["/"] == [], results
    assert results["/wrapped-code/"] == [], results
    assert any("image not loaded: /img/missing.png" in p for p in results["/broken-image/"]), results
    assert any("image not loaded: /index.html" in p for p in results["/not-an-image/"]), results
    assert any("code block overflows" in p for p in results["/wide-code/"]), results
    assert any("loads from another host: https://example.invalid/x.js" in p for p in results["/other-host/"]), results
    assert check_site.main([str(site)]) == 1
