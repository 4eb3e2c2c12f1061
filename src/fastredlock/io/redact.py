"""The one rule that keeps passwords out of text: messages, ``repr``, logs and CLI lines.

Whatever may hold a URL or a master's settings goes through :func:`redact` (text),
:func:`redact_settings` (a dict) or :func:`redacted_repr` (a NamedTuple's ``__repr__``) before it is
shown. The rule, in one place:

- a URL's user information: ``user:pass@`` becomes ``user:***@``, and the historic password-only
  form ``pass@`` becomes ``***@`` (a Redis URL's lone user information is its password);
- the value of every key whose name holds ``password`` (any case: ``password``,
  ``sentinel_password``, ``ssl_password``...), in a URL's query (``?password=...``), in ``key=value``
  text and in a dict or its ``repr`` (``'password': '...'``).

Public for the package's own modules (the CLI, the shims, the specs); not part of the API.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["MASK", "redact", "redact_settings", "redacted_repr", "is_secret_key"]

#: What a secret is replaced with.
MASK = "***"

# scheme://userinfo@ : userinfo runs to the last '@' before a space or a quote (greedy, then back),
# so a password with an unencoded '/', '?' or '#' (a malformed URL) is masked too; at worst the
# mask also hides part of a URL that has an '@' in its path or query.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s'\"]*)@")
# ?password=v, &sentinel_password=v, ssl_password=v (query or key=value text)
_KEY_VALUE = re.compile(r"(?i)([\w.-]*password[\w.-]*=)([^&\s'\",;)}\]]*)")
# 'password': 'v' / "ssl_password": b'v' (a dict's repr), password='v' (a NamedTuple's repr)
_QUOTED = re.compile(r"""(?i)(['"]?[\w.-]*password[\w.-]*['"]?\s*[:=]\s*b?)(['"])(.*?)(?<!\\)\2""")


def _userinfo(found: "re.Match[str]") -> str:
    user, colon, _secret = found.group(2).partition(":")
    masked = f"{user}:{MASK}" if colon else MASK
    return f"{found.group(1)}{masked}@"


def redact(text: Any) -> str:
    """Return ``str(text)`` with every password the rule finds (see the module) replaced by ``***``."""
    text = str(text)
    if "@" in text:
        text = _USERINFO.sub(_userinfo, text)
    if "assword" in text or "ASSWORD" in text:
        text = _QUOTED.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}{m.group(2)}", text)
        text = _KEY_VALUE.sub(lambda m: m.group(1) + (MASK if m.group(2) else ""), text)
    return text


def is_secret_key(key: Any) -> bool:
    """Whether a setting called ``key`` holds a secret (its name holds ``password``)."""
    return isinstance(key, str) and "password" in key.lower()


def redact_settings(settings: Mapping[Any, Any]) -> dict:
    """A copy of ``settings`` with secret values masked (and URLs in the other values redacted)."""
    return {k: (MASK if is_secret_key(k) and v is not None else redact(v) if isinstance(v, str) else v)
            for k, v in settings.items()}


def redacted_repr(self: Any) -> str:
    """``__repr__`` for a NamedTuple whose fields may hold secrets: those fields show ``***``."""
    fields = ", ".join(f"{name}={MASK if is_secret_key(name) and value is not None else value!r}"
                       for name, value in zip(self._fields, self))
    return f"{type(self).__name__}({fields})"
