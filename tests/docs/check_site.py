#!/usr/bin/env python3
"""Check a built documentation site in a real headless browser (Debian's ``chromium``).

    python tests/docs/check_site.py SITE_DIR        # after `mkdocs build --strict --site-dir SITE_DIR`

The site is served on a free loopback port; one headless chromium loads a checker page of the same
origin, which opens every page of the site in turn in a 1280 px wide frame and reports, per page:

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
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List, Optional

WIDTH = 1280
CHECKER = "/__fastredlock_check__.html"
MARK = "FASTREDLOCK-CHECK:"

# The checker page: opens each page in a same-origin iframe 1280 px wide, waits for its load event
# and its images, measures, and writes the results into its own DOM (read by --dump-dom).
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
  document.getElementById("out").textContent = "%(mark)s" + JSON.stringify(results);
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


def _handler(site: Path, checker: bytes):
    class Handler(http.server.SimpleHTTPRequestHandler):
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
    checker = (_CHECKER_HTML % {"width": WIDTH, "pages": json.dumps(pages), "mark": MARK}).encode()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(site, checker))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{CHECKER}"
        with tempfile.TemporaryDirectory(prefix="check-site-") as profile:
            # --virtual-time-budget: chromium runs the page's timers on virtual time, then dumps
            # the DOM; it waits for network (real time) meanwhile, so the budget is generous.
            argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
                    f"--window-size={WIDTH + 100},1000", "--virtual-time-budget=600000",
                    # every host but loopback fails at once: the site must not need the network
                    # (and a request that hangs would stall the page's virtual time)
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                    "--dump-dom", url]
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    out = proc.stdout.decode("utf-8", "replace")
    start = out.find(MARK)
    if start < 0:
        raise RuntimeError(f"chromium gave no result (exit {proc.returncode}): "
                           f"{proc.stderr.decode('utf-8', 'replace')[-2000:]}")
    end = out.find("</pre>", start)
    raw = out[start + len(MARK): end]
    raw = raw.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    results: Dict[str, List[str]] = json.loads(raw)
    missing = set(pages) - set(results)
    for page in missing:
        results[page] = ["not checked"]
    return results


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
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
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
