#!/usr/bin/env python3
"""Check a built documentation site in a real headless browser (Debian's ``chromium``).

    python tests/docs/check_site.py SITE_DIR        # after `mkdocs build --strict --site-dir SITE_DIR`

The site is served on a free loopback port; one headless chromium loads a checker page of the same
origin, which opens every page of the site in turn in a 1280 px wide frame and posts back, per page
(the browser is stopped once the results are in, or after a bounded time):

- the page loads (HTTP 200, and the frame's document has a body);
- every image loads: ``img.complete`` and ``naturalWidth > 0`` once the page has loaded (a missing
  or undecodable image fails);
- nothing is loaded from another host (fonts, scripts, images: the site works offline);
- no code block overflows horizontally: for every ``pre`` and ``pre > code``, ``scrollWidth`` is at
  most ``clientWidth`` (+1 px of rounding), i.e. no character of a code line is cut off or hidden
  behind a scroll bar at 1280 px.

Exits 0 when every page passes, 1 with one line per problem otherwise (2: chromium missing or it
gave no answer). Nothing here reaches beyond 127.0.0.1.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional

WIDTH = 1280
CHECKER = "/__fastredlock_check__.html"
RESULT = "/__fastredlock_result__"

# The checker page: opens each page in a same-origin iframe 1280 px wide, waits for its load event
# and its images, measures, and posts the results (JSON) to RESULT.
_CHECKER_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>check</title></head>
<body><pre id="out">running</pre>
<iframe id="f" style="width:%(width)dpx;height:900px;border:0"></iframe>
<script>
const pages = %(pages)s;
const frame = document.getElementById("f");
function sleep(ms) { return new Promise(r => setTimeout(r, ms)); }
function load(url) {
  return new Promise(resolve => {
    const timer = setTimeout(() => resolve(false), 15000);
    frame.onload = () => { clearTimeout(timer); resolve(true); };
    frame.src = url;
  });
}
async function checkPage(url) {
  const problems = [];
  let status = 0;
  try { status = (await fetch(url, {cache: "no-store"})).status; } catch (e) { status = -1; }
  if (status !== 200) { problems.push("HTTP " + status); return problems; }
  if (!(await load(url))) { problems.push("no load event within 15 s"); return problems; }
  const doc = frame.contentDocument;
  if (!doc || !doc.body) { problems.push("no document"); return problems; }
  const images = Array.from(doc.images);
  for (let i = 0; i < 100 && images.some(img => !img.complete); i++) await sleep(50);
  for (const img of images) {
    if (!img.complete || img.naturalWidth === 0) problems.push("image not loaded: " + img.getAttribute("src"));
  }
  const win = frame.contentWindow;
  for (const entry of win.performance.getEntriesByType("resource")) {
    if (!entry.name.startsWith(location.origin) && !entry.name.startsWith("data:")) {
      problems.push("loads from another host: " + entry.name);
    }
  }
  for (const el of doc.querySelectorAll("pre, pre > code")) {
    if (el.getClientRects().length === 0) continue;  // not displayed (a closed tab, a hidden block)
    if (el.scrollWidth > el.clientWidth + 1) {
      const line = (el.textContent || "").split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "");
      problems.push("code block overflows (" + el.scrollWidth + " > " + el.clientWidth + " px): " + line.slice(0, 80));
    }
  }
  return problems;
}
(async () => {
  const results = {};
  for (const page of pages) results[page] = await checkPage(page);
  await fetch("%(result)s", {method: "POST", body: JSON.stringify(results)});
  document.getElementById("out").textContent = "done";
})();
</script></body></html>
"""


def find_chromium() -> Optional[str]:
    """The chromium binary: $CHROMIUM, else chromium / chromium-browser / google-chrome on PATH."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def site_pages(site: Path) -> List[str]:
    """The URL path of every page of the built site (each ``index.html``; 404.html left out)."""
    pages = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if rel == "404.html" or rel.startswith("assets/"):
            continue
        pages.append("/" + (rel[: -len("index.html")] if rel.endswith("index.html") else rel))
    return pages


def _handler(site: Path, checker: bytes, received: Dict[str, bytes], done: threading.Event):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path != RESULT:
                self.send_error(404)
                return
            received["body"] = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(204)
            self.end_headers()
            done.set()

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path.split("?")[0] == CHECKER:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(checker)))
                self.end_headers()
                self.wfile.write(checker)
                return
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return functools.partial(Handler, directory=str(site))


def check(site: Path, chromium: str, timeout: float = 180.0) -> Dict[str, List[str]]:
    """Serve ``site`` on loopback, load every page in headless chromium; the problems per page."""
    pages = site_pages(site)
    checker = (_CHECKER_HTML % {"width": WIDTH, "pages": json.dumps(pages), "result": RESULT}).encode()
    received: Dict[str, bytes] = {}
    done = threading.Event()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(site, checker, received, done))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{CHECKER}"
        with tempfile.TemporaryDirectory(prefix="check-site-") as profile:
            argv = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
                    f"--window-size={WIDTH + 100},1000", "--remote-debugging-port=0",
                    # every host but loopback fails at once: the site must not need the network
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", url]
            log_path = Path(profile) / "chromium.log"
            with open(log_path, "wb") as log:  # a file, not a pipe: nobody has to drain it
                browser = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
                try:
                    finished = done.wait(timeout)
                finally:
                    _stop(browser)
            if not finished:
                raise RuntimeError(f"no result from chromium within {timeout:g} s (exit {browser.returncode}): "
                                   f"{log_path.read_text(errors='replace')[-2000:]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    results: Dict[str, List[str]] = json.loads(received["body"])
    for page in set(pages) - set(results):
        results[page] = ["not checked"]
    return results


def _stop(browser: "subprocess.Popen[bytes]") -> None:
    """Stop chromium and its helper processes (its own process group), bounded."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(browser.pid, sig)
        except ProcessLookupError:
            return
        try:
            browser.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --site-dir ...)")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("check_site: no chromium on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    try:
        results = check(args.site, chromium)
    except RuntimeError as exc:
        print(f"check_site: {exc}", file=sys.stderr)
        return 2
    bad = {page: problems for page, problems in results.items() if problems}
    for page, problems in sorted(bad.items()):
        for problem in problems:
            print(f"{page}: {problem}")
    print(f"check_site: {len(results)} pages, {len(bad)} with problems "
          f"(images loaded, no code block wider than its column at {WIDTH} px)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
