"""Find the Python examples in README.md and docs/, and say how each one is to be run.

The convention (documented for writers in docs/internals.md, "Examples that run"):

- Every fenced block whose info string is ``python`` is an example, and runs.
- ``127.0.0.1`` with a port from 7001 to 7009 stands for the test's local masters: 7001 is the
  first one started, 7002 the second, and so on. Write them as a reader would (``redis://127.0.0.1:7001``,
  ``("127.0.0.1", 7002)``, ``port=7003``); the test rewrites the port to the real one.
- Examples run with the library's defaults (restart-aware voting included); a lock's TTL on the
  test's masters is at most ``MAX_EXAMPLE_TTL`` seconds (their uptime is made to exceed it).
- An HTML comment on the line(s) right before the fence says more:
  ``<!-- example: masters=5 -->`` asks for that many masters (default 3, at most 9);
  ``<!-- fragment: why -->`` marks a block that cannot run on its own (a deployment's addresses,
  a piece of a larger program); it is reported as a skip with that reason.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MASTERS = 3
MAX_MASTERS = 9
#: The largest lock TTL (seconds) an example may use on the test's masters: the test lets them be up
#: longer than that before the first example, so that restart-aware voting (on by default, grace =
#: the largest TTL a client used) counts their votes, as on masters that have been up a while. An
#: example that needs more starts masters of its own, or says ``restart_aware=False`` itself.
MAX_EXAMPLE_TTL = 10.0

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*(example|fragment)\s*:?\s*(.*?)\s*-->\s*$")
_PORT = re.compile(r"(?<![\d.])70(0[1-9])(?!\d|\.\d)")


@dataclasses.dataclass
class Example:
    """One ```python block: where it is, its code, and what its directive asked for."""

    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    masters: int = DEFAULT_MASTERS
    fragment: Optional[str] = None  # the reason, when the block is marked as a fragment

    @property
    def id(self) -> str:
        try:
            where = self.path.relative_to(ROOT).as_posix()
        except ValueError:  # a page outside the checkout (the finder's own tests)
            where = self.path.name
        return f"{where}:{self.line}"

    def bind(self, ports: List[int]) -> str:
        """Return the code with ports 7001.. replaced by the started masters' ports."""
        def sub(match: "re.Match[str]") -> str:
            index = int(match.group(1)) - 1
            if index >= len(ports):
                raise LookupError(f"{self.id}: port 70{match.group(1)} but only {len(ports)} masters asked for")
            return str(ports[index])
        return _PORT.sub(sub, self.code)


def _parse_directive(text: str, where: str) -> Dict[str, str]:
    kind, rest = _DIRECTIVE.match(text).groups()  # type: ignore[union-attr]
    if kind == "fragment":
        if not rest:
            raise ValueError(f"{where}: a fragment needs a reason: <!-- fragment: why -->")
        return {"fragment": rest}
    options: Dict[str, str] = {}
    for item in rest.split():
        key, _, value = item.partition("=")
        if key != "masters" or not value.isdigit() or not 1 <= int(value) <= MAX_MASTERS:
            raise ValueError(f"{where}: unknown example option {item!r} (known: masters=1..{MAX_MASTERS})")
        options[key] = value
    return options


def examples_in(path: Path) -> Iterator[Example]:
    """Yield every ```python block of a Markdown file, with the directive before it applied."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, info = match.groups()
        start = i
        body: List[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        if i >= len(lines):
            raise ValueError(f"{path}:{start + 1}: unclosed code fence")
        i += 1
        if info != "python":
            continue
        example = Example(path, start + 1, "\n".join(body) + "\n")
        j = start - 1
        while j >= 0 and _DIRECTIVE.match(lines[j]):
            options = _parse_directive(lines[j], f"{path}:{j + 1}")
            example.fragment = options.get("fragment", example.fragment)
            if "masters" in options:
                example.masters = int(options["masters"])
            j -= 1
        yield example


def markdown_files() -> List[Path]:
    """README.md and every page of the documentation site, in a stable order."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def all_examples() -> List[Example]:
    """Every example of README.md and docs/."""
    return [example for path in markdown_files() for example in examples_in(path)]


# What sets a lock's TTL in the examples: fastredlock's ``ttl=``, the shims' ``expire=``,
# ``auto_release_time=``, ``lock_timeout=``, redis-py's ``timeout=`` (also the acquire timeouts:
# counted too, conservatively), ``restart_grace=``, ``extend(N)``, and redlock-py's positional
# ``lock("name", ms)``. A value of 1000 or more is taken as milliseconds (redlock-py, redlock).
_TTLS = re.compile(r"\b(?:ttl|expire|auto_release_time|lock_timeout|timeout|restart_grace)\s*=\s*([\d.]+)"
                   r"|\.extend\(\s*([\d.]+)\s*\)"
                   r"|\.lock\(\s*[\"'][^\"']*[\"']\s*,\s*([\d.]+)\s*\)")


def ttls_of(code: str) -> List[float]:
    """Every lock TTL (seconds) an example's code states (see ``_TTLS``)."""
    found = []
    for match in _TTLS.finditer(code):
        value = float(next(g for g in match.groups() if g is not None))
        found.append(value / 1000 if value >= 1000 else value)
    return found


def uses_shared_masters(example: Example) -> bool:
    """Whether the example runs on the test's masters with restart-aware voting as by default
    (not on masters it starts itself, nor with ``restart_aware=False`` written in it)."""
    return "start_masters(" not in example.code and "restart_aware=False" not in example.code
