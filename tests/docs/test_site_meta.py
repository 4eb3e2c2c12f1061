"""What the site says about itself: README's links for the package index are absolute and land on
pages of the site, the changelog page is CHANGELOG.md, the version comes from pyproject.toml, the
repository link is named."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mkdocs_value(key: str) -> str:
    match = re.search(rf"^{key}:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert match, f"mkdocs.yml has no {key}"
    return match.group(1)


def test_readme_links_are_absolute_and_land_on_pages():
    """PyPI shows README.md without the repository around it: every link is absolute, and each one
    into the documentation is site_url + a page that exists (and its anchor, a heading of it)."""
    site_url = _mkdocs_value("site_url")
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    relative = [link for link in links if not re.match(r"https?://", link)]
    assert not relative, f"README.md has relative links (broken on the package index): {relative}"
    into_docs = [link for link in links if link.startswith(site_url)]
    assert len(into_docs) >= 10
    for link in into_docs:
        page, _, anchor = link[len(site_url):].partition("#")
        stem = ROOT / "docs" / page.rstrip("/")
        source = stem / "index.md" if (stem / "index.md").exists() or not page else stem.with_suffix(".md")
        assert source.exists(), f"{link}: no page {source.relative_to(ROOT)}"
        if anchor:
            headings = re.findall(r"^#+\s+(.*?)\s*$", source.read_text(), re.M)
            slugs = {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h.lower())).strip("-") for h in headings}
            assert anchor in slugs, f"{link}: no heading #{anchor} in {source.relative_to(ROOT)}"


def test_changelog_page_includes_the_changelog():
    page = (ROOT / "docs" / "changelog.md").read_text()
    assert '--8<-- "CHANGELOG.md"' in page
    assert "changelog.md" in (ROOT / "mkdocs.yml").read_text()


def test_version_and_repository_name():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / ".hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    config = hooks.on_config({"extra": {}, "copyright": None})
    assert config["extra"]["version"] == version
    assert version in config["copyright"]
    assert _mkdocs_value("repo_name") == "fastredlock"
