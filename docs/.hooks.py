"""mkdocs hooks (mkdocs.yml ``hooks:``): the package's version on every page of the site.

The version is read from pyproject.toml (``[project] version``), the one place it is written, and
shown in the footer of every page (``copyright``) and in the site's ``extra.version``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def project_version(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``[project] version`` of pyproject.toml."""
    text = pyproject.read_text(encoding="utf-8")
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    match = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not match:
        raise ValueError(f"no [project] version in {pyproject}")
    return match.group(1)


def on_config(config: Any, **kwargs: Any) -> Any:
    """Put the version into the footer and ``extra.version``."""
    version = project_version()
    config["extra"]["version"] = version
    config["copyright"] = f"fastredlock {version} · MIT licensed"
    return config
