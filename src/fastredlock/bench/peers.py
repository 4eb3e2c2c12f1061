"""Peers are installed each into its own ``pip install --target`` folder (cached), so that
libraries pinning different redis-py versions, or sharing the module name ``redlock``, never meet."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple


def default_peers_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return os.path.join(base, "fastredlock", f"bench-peers-{tag}")


def install_group(name: str, reqs: List[str], root: str, reinstall: bool, allow: bool
                  ) -> Tuple[Optional[str], str]:
    """Return (folder or None, note). The folder's stamp file remembers what was installed."""
    target = os.path.join(root, name)
    stamp = os.path.join(target, ".fastredlock-bench.json")
    want = {"requirements": reqs, "python": sys.version.split()[0]}
    if not reinstall and os.path.exists(stamp):
        try:
            with open(stamp) as f:
                if json.load(f) == want:
                    return target, "cached"
        except (OSError, ValueError):
            pass
    if not allow:
        return None, f"not installed in {target} and --no-install was given"
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
           "--quiet", "--target", target, *reqs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        shutil.rmtree(target, ignore_errors=True)
        return None, f"`pip install --target` of {' '.join(reqs)} timed out after 900 s"
    if proc.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()
                 and not ln.startswith("WARNING: Running pip as")]
        return None, f"pip install {' '.join(reqs)} failed: " + " | ".join(lines[-3:])[-400:]
    with open(stamp, "w") as f:
        json.dump(want, f)
    return target, "installed"
