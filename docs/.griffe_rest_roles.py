"""Griffe extensions for the API reference (loaded by mkdocs.yml, ``extensions:``).

``ReSTRoles``: the docstrings are written with Sphinx roles (``:class:`Redlock```,
``:meth:`~fastredlock.Lock.release```) and reST literals (````code````, which Markdown also reads
as code). mkdocstrings renders Markdown, where a role would show as raw text, so each role becomes
the code span of the name it shows (``Redlock``, ``release``), wrapped in an *optional*
cross-reference to the object it names (resolved in the docstring owner's scope, as Python would,
then by suffix among the package's objects). mkdocs-autorefs turns an optional reference into a
link where the target is documented on the site, and into the plain code span otherwise, so an
undocumented target never fails ``mkdocs build --strict``.

A reST literal block (a paragraph ending in ``::`` and the indented lines after it) becomes a
fenced code block, so no stray ``::`` is shown.

``LiteralDefaults``: a parameter whose default is the name of a module constant
(``cooldown=COOLDOWN``) shows the constant's literal value (``cooldown=0.1``), which is what a
reader needs; the constant itself is private to the package.

The docstrings and signatures in the sources are not changed: only the loaded objects.
"""
from __future__ import annotations

import ast
import html
import operator
import re
from typing import Any, Dict, Iterator, List, Optional

from griffe import Extension

# :role:`target`, :role:`~a.b.target` (shows "target"), :role:`text <target>` (shows "text")
_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`([^`<]*?)(?:\s*<([^`>]*)>)?`"
    r"|:(?:term|ref):`([^`<]*?)(?:\s*<[^`>]*>)?`"
)


def _objects(obj: Any) -> Iterator[Any]:
    """``obj`` and every member under it, aliases left out (their targets are visited where defined)."""
    yield obj
    for member in list(obj.members.values()):
        if member.is_alias:
            continue
        yield from _objects(member)


def _lookup(collection: Any, path: str) -> Optional[Any]:
    """The object at ``path`` (aliases followed), None when the package has no such object."""
    try:
        found = collection[path]
    except Exception:  # KeyError, an alias that cannot be resolved, ...
        return None
    try:
        return found.final_target if found.is_alias else found
    except Exception:
        return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _literal_blocks(text: str) -> str:
    """reST ``para::`` + indented block -> ``para:`` + a fenced block (``::`` alone: no line)."""
    lines = text.split("\n")
    out: List[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::"):
            out.append(line)
            i += 1
            continue
        margin = _indent(line)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        block: List[str] = []
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > margin):
            block.append(lines[j])
            j += 1
        while block and not block[-1].strip():
            block.pop()
        if not block:  # "::" not followed by an indented block: leave the text as it is
            out.append(line)
            i += 1
            continue
        head = line.rstrip()[:-2].rstrip()
        if head.strip():
            out.append(head + ":")
            out.append("")
        inner = min(_indent(b) for b in block if b.strip())
        first = block[0].strip().upper()
        language = "sql" if first.startswith(("SELECT", "UPDATE", "INSERT", "DELETE", "CREATE")) else "python"
        pad = " " * margin
        out.append(f"{pad}```{language}")
        out.extend(pad + b[inner:] if b.strip() else "" for b in block)
        out.append(f"{pad}```")
        out.append("")
        i = j
    return "\n".join(out)


class ReSTRoles(Extension):
    """Rewrite reST roles in every docstring of the package as optional cross-references."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        """Rewrite the roles of every docstring of the package, once it is loaded."""
        objects = list(_objects(pkg))
        by_suffix: Dict[str, List[str]] = {}
        for obj in objects:
            parts = obj.path.split(".")
            for i in range(1, len(parts)):
                by_suffix.setdefault(".".join(parts[i:]), []).append(obj.path)
        collection = pkg.modules_collection
        for obj in objects:
            docstring = obj.docstring
            if docstring is not None and "::" in docstring.value:
                docstring.value = _literal_blocks(docstring.value)
            if docstring is not None and ":`" in docstring.value:
                docstring.value = _ROLE.sub(lambda m, o=obj: self._rewrite(m, o, collection, by_suffix),
                                            docstring.value)

    @staticmethod
    def _rewrite(match: "re.Match[str]", owner: Any, collection: Any, by_suffix: Dict[str, List[str]]) -> str:
        if match.group(3) is not None:  # :term:, :ref: -- no Python object: plain code
            return f"`{match.group(3).strip()}`"
        text, explicit = match.group(1).strip(), match.group(2)
        target = (explicit or text).strip().lstrip("~")
        shown = text
        if shown.startswith("~"):
            shown = shown[1:].rsplit(".", 1)[-1]
        shown = shown.lstrip(".")
        path = ReSTRoles._resolve(target, owner, collection, by_suffix)
        code = f"<code>{html.escape(shown)}</code>"
        if path is None:
            return f"`{shown}`"
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    @staticmethod
    def _resolve(target: str, owner: Any, collection: Any, by_suffix: Dict[str, List[str]]) -> Optional[str]:
        """The path of the object ``target`` names from ``owner``'s docstring, or None."""
        relative = target.startswith(".")
        target = target.lstrip(".").rstrip("()")
        if not target:
            return None
        if not relative:
            if target.split(".", 1)[0] == owner.package.name and _lookup(collection, target) is not None:
                return target
            head, _, rest = target.partition(".")
            scope = owner
            while scope is not None:
                base = None
                if scope.is_class:  # a member inherited from a base class: its defining path
                    try:
                        member = scope.all_members.get(head)
                        if member is not None:
                            base = member.final_target.path if member.is_alias else member.path
                    except Exception:
                        base = None
                if base is None:
                    try:
                        base = scope.resolve(head)
                    except Exception:
                        base = None
                if base is not None:
                    path = base + ("." + rest if rest else "")
                    if _lookup(collection, path) is not None:
                        return path
                    break
                scope = scope.parent
        # Sphinx's ".name": any object whose path ends with it; the one nearest the owner wins.
        found = by_suffix.get(target, [])
        if not found:
            return None
        owner_parts = owner.path.split(".")

        def shared(path: str) -> int:
            n = 0
            for a, b in zip(path.split("."), owner_parts):
                if a != b:
                    break
                n += 1
            return n

        return max(found, key=lambda p: (shared(p), not any(s.startswith("_") for s in p.split(".")), -len(p)))


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.LShift: operator.lshift}


def _literal(source: str) -> Optional[str]:
    """The value of a constant expression (numbers, strings, arithmetic), as Python would print it."""
    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bytes, bool, type(None))):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(source)
    try:
        return repr(value(ast.parse(source, mode="eval").body))
    except (SyntaxError, ValueError, TypeError, ArithmeticError):
        return None


class LiteralDefaults(Extension):
    """Show a default that names a module constant as the constant's literal value."""

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        """Replace such defaults in every function of the package, once it is loaded."""
        collection = pkg.modules_collection
        for obj in _objects(pkg):
            if not obj.is_function:
                continue
            for parameter in obj.parameters:
                default = parameter.default
                if default is None or isinstance(default, str) or not hasattr(default, "canonical_path"):
                    continue
                constant = _lookup(collection, default.canonical_path)
                if constant is None or not constant.is_attribute or constant.value is None:
                    continue
                literal = _literal(str(constant.value))
                if literal is not None:
                    parameter.default = literal


def _typevar_bound(source: str) -> Optional[str]:
    """``TypeVar("_M", bound="LocalMaster")`` -> ``"LocalMaster"``; None for anything else."""
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "TypeVar":
        for keyword in node.keywords:
            if keyword.arg == "bound" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
            if keyword.arg == "bound" and isinstance(keyword.value, ast.Name):
                return keyword.value.id
    return None


class PublicNames(Extension):
    """Keep the package's private names off the reference pages.

    - Members with public-looking names that only the package itself calls (:data:`INTERNAL`) are
      dropped from the loaded objects (the rendered pages only).
    - A signature's private type variable (``-> '_M'``, ``_M = TypeVar("_M", bound="LocalMaster")``)
      shows as its bound (``-> LocalMaster``).
    """

    #: Public-looking members that are plumbing between the package's own modules, as
    #: ``Class.member`` of the class that defines them (in whichever module it lives: the package's
    #: modules move, the names stay).
    INTERNAL = frozenset({
        "LockBase.held",
        "LockBase.release_args_of",
        "LockBase.released_all",
        "LockBase.took_rounds",
        "LockBase.unwaited_args_of",
        "LockBase.watch_info",
        "LockBase.renewed",
        "Lock.held",  # fastredlock.asyncio's Lock redefines it
        "Redlock.async_executor",  # fastredlock.asyncio's Redlock
    })

    #: The public modules (and their submodules): what they export is the API; the rest of the
    #: package (handles/, engine/, io/, sync/, protocol/, ...) is its implementation.
    PUBLIC_MODULES = ("fastredlock.asyncio", "fastredlock.errors", "fastredlock.events", "fastredlock.fencing", "fastredlock.jobs",
                      "fastredlock.metrics", "fastredlock.testing", "fastredlock.compat")

    def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
        """Drop the internal members and replace private type variables, once the package is loaded;
        mark which bases of each class are public (``extra["fastredlock"]["public_bases"]``, read by
        docs/.templates/python/material/class.html.jinja)."""
        collection = pkg.modules_collection
        exported = set()
        for obj in _objects(pkg):
            if obj.is_module and (obj.path == pkg.name or obj.path.startswith(self.PUBLIC_MODULES)):
                exported.update(obj.exports or ())
        for obj in _objects(pkg):
            if obj.is_class:
                obj.extra["fastredlock"]["public_bases"] = [
                    i for i, base in enumerate(obj.bases) if self._public_base(base, pkg.name, exported)]
        for obj in list(_objects(pkg)):
            if obj.is_class:
                for name in [n for n in obj.members if f"{obj.name}.{n}" in self.INTERNAL]:
                    del obj.members[name]
        for obj in list(_objects(pkg)):
            if not obj.is_function:
                continue
            module = obj.module
            if obj.returns is not None:
                obj.returns = self._public(obj.returns, module) or obj.returns
            for parameter in obj.parameters:
                if parameter.annotation is not None:
                    parameter.annotation = self._public(parameter.annotation, module) or parameter.annotation

    @staticmethod
    def _public_base(base: Any, package: str, exported: set) -> bool:
        """A base outside the package (``Exception``, ``NamedTuple``), or one the package exports."""
        path = getattr(base, "canonical_path", None) or str(base)
        parts = path.split(".")
        if any(part.startswith("_") for part in parts):
            return False
        if parts[0] != package:  # Exception, typing.NamedTuple, ...
            return True
        return parts[-1] in exported

    @staticmethod
    def _public(annotation: Any, module: Any) -> Optional[str]:
        name = str(annotation).strip("'\"")
        if not name.startswith("_") or not name.isidentifier() or name not in module.members:
            return None
        member = module.members[name]
        if member.is_alias or not member.is_attribute or member.value is None:
            return None
        return _typevar_bound(str(member.value))
