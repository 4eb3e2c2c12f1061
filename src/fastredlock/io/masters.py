"""Turn the ways a user can name a master into one plain description, :class:`MasterSpec`.

Accepted: URLs (``redis://[user:pass@]host:port[/db]``, ``rediss://...`` for TLS,
``unix:///path.sock[?db=N]``), dicts of ``host``/``port``/``db``/``username``/``password`` (or
``path`` / ``unix_socket_path``; ``ssl=True`` and redis-py's ``ssl_*`` keys or an ``ssl_context``
for TLS), ``(host, port)`` tuples, and ``redis.Redis`` clients, whose connection settings (TLS
ones included) are read but never used to talk: the cores open their own sockets.

Sentinel-managed masters (one Sentinel service is one master of the Redlock; its address is asked
of the sentinels at each connect, see :mod:`fastredlock.io.sentinel`):
``redis+sentinel://[user:pass@]host:port[,host:port...]/service[/db]`` (``rediss+sentinel://``:
TLS to the master, with the ``ssl_*`` query parameters, and to the sentinels unless
``sentinel_ssl=false``; ``sentinel_username``/``sentinel_password`` log in to the sentinels, the
user info logs in to the master), dicts with ``sentinels`` (a list of ``(host, port)`` or
``"host:port"``) and ``service`` (plus the master's keys above and
``sentinel_username``/``sentinel_password``), ``(redis.sentinel.Sentinel(...), "service")``
tuples, and the clients ``Sentinel.master_for("service")`` returns. Sentinels are asked over TLS
when ``sentinel_ssl`` says so (``redis+sentinel://...?sentinel_ssl=true``, a dict's
``sentinel_ssl=True``; the default of ``rediss+sentinel://``), or when the
``redis.sentinel.Sentinel``'s own connections are TLS ones; their certificates are checked with the
``sentinel_ssl_*`` settings (redis-py's ``ssl_*`` names after ``sentinel_``), or, where none is
given, with the master's ``ssl_*`` settings, against each sentinel's own host name.

Redis Cluster masters (one cluster is one master of the Redlock: one vote per key, the answer of
the node that owns the key's slot; see :mod:`fastredlock.io.cluster`):
``redis+cluster://[user:pass@]host:port[,host:port...]`` (``rediss+cluster://``: TLS to every node,
with the ``ssl_*`` query parameters), dicts with ``cluster`` (a list of ``(host, port)`` or
``"host:port"``, the nodes asked for the slot map; plus the keys above but ``db``), and
``redis.cluster.RedisCluster`` clients (their startup nodes and connection settings are read).

TLS settings use redis-py's names (``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_ca_path``,
``ssl_certfile``, ``ssl_keyfile``, ``ssl_password``, ``ssl_check_hostname``, ``ssl_min_version``),
as URL query parameters or dict keys; a master's :class:`~._tls.TlsOptions` are checked here (the
context is built, so a missing CA file or a wrong key password is an error at construction, not at
the first lock). ``ssl_*`` settings on a plain master (``redis://``, a dict without ``ssl=True``)
are refused, not ignored. A ``redis.Redis`` client counts as TLS when its connection class is a
redis-py ``SSLConnection`` (subclasses included) or its pool has ``ssl_*`` settings.
"""
from __future__ import annotations

import os
import socket
from typing import Any, Iterable, List, NamedTuple, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

from .tls import TlsOptions, context_for
from .redact import redact, redact_settings, redacted_repr

__all__ = ["ClusterSpec", "MasterSpec", "SentinelSpec", "parse_master", "parse_masters", "shared_servers", "split_urls"]

_DICT_KEYS = frozenset(
    {"host", "port", "db", "username", "password", "path", "unix_socket_path", "socket_timeout", "ssl",
     "ssl_context"}
)
#: redis-py's TLS settings, as URL query parameters, dict keys and ``redis.Redis`` keyword arguments.
_TLS_KEYS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_password",
             "ssl_check_hostname", "ssl_min_version")
#: The same for the sentinels (``sentinel_ssl_ca_certs``, ...), and the switch that asks for TLS.
_SENTINEL_TLS_KEYS = tuple("sentinel_" + k for k in _TLS_KEYS)
#: The keys of a Sentinel master's dict besides the master's own (no host, port or path: asked).
_SENTINEL_KEYS = frozenset({"sentinels", "service", "sentinel_username", "sentinel_password", "sentinel_ssl",
                            "sentinel_ssl_context", *_SENTINEL_TLS_KEYS})
_SENTINEL_PORT = 26379
#: The keys of a cluster master's dict besides the login and TLS ones (no host, port, path or db).
_CLUSTER_KEYS = frozenset({"cluster"})
_FALSE = ("0", "false", "no", "off", "")


class SentinelSpec(NamedTuple):
    """The sentinels that know where a master is, and the name of its service."""

    #: ``(host, port)`` of each sentinel, asked in this order (the last one that answered first).
    sentinels: Tuple[Tuple[str, int], ...]
    service: str
    #: Login to the sentinels (not to the master: that is the :class:`MasterSpec`'s).
    username: Optional[str] = None
    password: Optional[str] = None
    #: TLS settings for the sentinels (their certificates checked against each sentinel's host),
    #: or None: the sentinels are asked in plain text.
    tls: Optional[TlsOptions] = None

    def __repr__(self) -> str:  # no password in tracebacks, logs, error trackers
        return redacted_repr(self)


class ClusterSpec(NamedTuple):
    """The nodes of a Redis Cluster that are asked for its slot map (the rest are learned)."""

    #: ``(host, port)`` of each node given, asked in this order.
    seeds: Tuple[Tuple[str, int], ...]


class MasterSpec(NamedTuple):
    """Where one master is and how to log in to it.

    A Sentinel-managed master has ``host=None, port=0`` and :attr:`sentinel` set: the I/O twins
    ask the sentinels for its address before each connect (a copy of the spec with the address
    filled in is what they connect to).
    """

    host: Optional[str]  # None for a Unix socket
    port: int  # 0 for a Unix socket
    path: Optional[str]  # the Unix socket path, or None
    db: int
    username: Optional[str]
    password: Optional[str]
    #: TLS settings (``rediss://``), or None for a plain connection.
    tls: Optional[TlsOptions] = None
    #: The sentinels to ask for the address, or None for a master at a fixed address.
    sentinel: Optional[SentinelSpec] = None
    #: A Redis Cluster master: its nodes to ask for the slot map (``host`` is then None; the
    #: spec of one of its nodes has ``host``/``port`` set and keeps this), or None.
    cluster: Optional[ClusterSpec] = None

    def __repr__(self) -> str:  # no password in tracebacks, logs, error trackers
        return redacted_repr(self)

    @property
    def label(self) -> str:
        """A short name for messages and outcomes (never includes the password)."""
        if self.cluster is not None and self.host is None:
            return "cluster:" + ",".join(f"{h}:{p}" for h, p in self.cluster.seeds)
        if self.sentinel is not None and self.host is None:
            where = f"sentinel:{self.sentinel.service}"
        else:
            where = f"unix://{self.path}" if self.path else f"{self.host}:{self.port}"
        return where if self.db == 0 else f"{where}/{self.db}"


def _check_port(port: Any, what: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int):
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise ValueError(f"masters: bad port {port!r} in {what}") from None
    if not 0 < port < 65536:
        raise ValueError(f"masters: port {port} out of range in {what}")
    return port


def _check_db(db: Any, what: str) -> int:
    try:
        db = int(db)
    except (TypeError, ValueError):
        raise ValueError(f"masters: bad db {db!r} in {what}") from None
    if db < 0:
        raise ValueError(f"masters: db must be >= 0 in {what}")
    return db


def _check_host(host: Any, what: str) -> str:
    if not isinstance(host, str) or not host:
        raise ValueError(f"masters: missing or bad host in {what}")
    return host


def _opt_str(value: Any, field: str, what: str) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode()
    if not isinstance(value, str):
        raise TypeError(f"masters: {field} must be str in {what}")
    return value


def _tls_options(settings: dict, what: str) -> TlsOptions:
    """TLS options from redis-py's ``ssl_*`` settings (strings from a URL, or values); checked by
    building the context once."""
    fields: dict = {}
    for key in _TLS_KEYS:
        value = settings.get(key)
        if value is None:
            continue
        field = key[4:]
        if field == "check_hostname":
            value = value if isinstance(value, bool) else str(value).lower() not in _FALSE
        elif field == "cert_reqs":
            if isinstance(value, int):  # ssl.VerifyMode
                value = {0: "none", 1: "optional", 2: "required"}.get(int(value), value)
            value = str(value).lower()
        elif field not in ("min_version", "password"):
            value = os.fspath(value)
        fields[field] = value
    if settings.get("ssl_context") is not None:
        fields["context"] = settings["ssl_context"]
    opts = TlsOptions(**fields)
    try:
        context_for(opts)
    except ValueError as exc:
        raise ValueError(f"{exc} in {what}") from None
    return opts


def _dict_tls(d: dict, what: str) -> Optional[TlsOptions]:
    """A dict's TLS options (``ssl=True`` or an ``ssl_context``), or None; ``ssl_*`` alone is an error."""
    if d.get("ssl") or d.get("ssl_context") is not None:
        return _tls_options(d, what)
    if any(d.get(k) is not None for k in _TLS_KEYS):
        raise ValueError(f"masters: ssl_* settings without ssl=True in {what}")
    return None


def _from_url(url: str) -> MasterSpec:
    if url[:16].lower().startswith(("redis+sentinel:", "rediss+sentinel:")):
        parts = urlsplit(url)
        return _from_sentinel_url(url, parts, parts.scheme.lower())
    if url[:16].lower().startswith(("redis+cluster:", "rediss+cluster:")):
        return _from_cluster_url(url)
    if url[:5].lower() == "unix:":  # (no TLS over a Unix socket: its ssl_* settings are refused)
        try:
            query = parse_qs(urlsplit(url).query)
        except ValueError:
            query = {}  # a malformed URL: said below
        _no_tls_settings(query, url)
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme == "unix":
            if not parts.path:
                raise ValueError
            query = parse_qs(parts.query)
            db = _check_db(query.get("db", ["0"])[0], _safe(url))
            password = query.get("password", [None])[0]
            if parts.password is not None:
                password = unquote(parts.password)
            username = unquote(parts.username) if parts.username else None
            return MasterSpec(None, 0, unquote(parts.path), db, username, password)
        if scheme not in ("redis", "rediss"):
            raise ValueError
        host = parts.hostname
        port = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise ValueError(
            f"masters: malformed URL {_safe(url)!r}; expected redis[s]://[user:pass@]host:port[/db] or unix:///path"
        ) from None
    if not host:
        raise ValueError(f"masters: URL {_safe(url)!r} has no host")
    db = 0
    path = parts.path.strip("/")
    if path:
        db = _check_db(path, _safe(url))
    query = parse_qs(parts.query)
    if "db" in query:
        db = _check_db(query["db"][0], _safe(url))
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if username is not None and password is None:
        # redis://secret@host is the historic "password only" form.
        username, password = None, username
    tls = None
    if scheme == "rediss":
        tls = _tls_options({k: v[0] for k, v in query.items() if k in _TLS_KEYS}, _safe(url))
    else:
        _no_tls_settings(query, url)
    return MasterSpec(host, _check_port(port or 6379, _safe(url)), None, db, username, password, tls)


def _no_tls_settings(query: dict, url: str) -> None:
    """A plain URL's ``ssl_*`` query parameters are refused (as a dict's without ``ssl=True``):
    ignoring them would connect in plain text to a master the user meant to reach over TLS."""
    given = sorted(k for k in query if k.startswith("ssl_"))
    if given:
        scheme = url.partition(":")[0].lower()
        raise ValueError(f"masters: TLS settings {given} on a plain {scheme}:// URL (not TLS): use rediss:// "
                         "for TLS, or leave them out")


def _sentinel_address(text: str, what: str, default: int = _SENTINEL_PORT) -> Tuple[str, int]:
    """``host[:port]`` (``[v6]:port`` too) of one sentinel (or cluster node); the port defaults
    to 26379 (``default``)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else default
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, default
    return _check_host(host, what), _check_port(port, what)


def _login(settings: dict, userinfo: str) -> None:
    """Put a URL's ``user:pass`` (or the historic password-only form) into ``settings``."""
    if userinfo:
        username, colon, password = userinfo.partition(":")
        if colon:
            settings["username"], settings["password"] = unquote(username) or None, unquote(password)
        else:
            settings["password"] = unquote(username)


def _from_sentinel_url(url: str, parts: Any, scheme: str) -> MasterSpec:
    what = _safe(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    names = [p for p in parts.path.split("/") if p]
    if not hosts or not names or len(names) > 2:
        raise ValueError(f"masters: malformed URL {what!r}; expected "
                         "redis[s]+sentinel://[user:pass@]host:port[,host:port...]/service[/db]")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    settings: dict = {k: v for k, v in query.items() if k in _TLS_KEYS}
    settings["sentinels"] = [_sentinel_address(h, what) for h in hosts.split(",")]
    settings["service"] = unquote(names[0])
    settings["db"] = names[1] if len(names) == 2 else query.get("db", 0)
    _login(settings, userinfo)
    for key in ("sentinel_username", "sentinel_password", *_SENTINEL_TLS_KEYS):
        if key in query:
            settings[key] = query[key]
    settings["ssl"] = scheme == "rediss+sentinel"
    # rediss+sentinel://: the sentinels over TLS too, unless sentinel_ssl=false says otherwise.
    settings["sentinel_ssl"] = (str(query["sentinel_ssl"]).lower() not in _FALSE if "sentinel_ssl" in query
                                else settings["ssl"])
    return _from_sentinel_dict(settings, what)


def _from_cluster_url(url: str) -> MasterSpec:
    what = _safe(url)
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    if not hosts or parts.path.strip("/"):
        raise ValueError(f"masters: malformed URL {what!r}; expected "
                         "redis[s]+cluster://[user:pass@]host:port[,host:port...] (a cluster has no db)")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    settings: dict = {k: v for k, v in query.items() if k in _TLS_KEYS}
    settings["cluster"] = [_sentinel_address(h, what, 6379) for h in hosts.split(",")]
    _login(settings, userinfo)
    settings["ssl"] = parts.scheme.lower() == "rediss+cluster"
    return _from_cluster_dict(settings, what)


def _address_list(d: dict, field: str, extra: frozenset, why: str, what: str, default: int) -> list:
    """The ``(host, port)`` list in ``d[field]`` (``"host:port"`` strings too) of a dict that must
    name no host, port or path of its own (``why`` says where the addresses come from)."""
    unknown = set(d) - _DICT_KEYS - extra - set(_TLS_KEYS)
    if unknown or any(d.get(k) is not None for k in ("host", "port", "path", "unix_socket_path")):
        raise ValueError(f"masters: unknown key(s) {sorted(unknown or {'host', 'port', 'path'} & set(d))} "
                         f"in {what} ({why})")
    raw = d.get(field)
    if isinstance(raw, (str, bytes)) or not raw:
        raise ValueError(f"masters: {field} must be a non-empty list of (host, port) in {what}")
    addresses = []
    for entry in raw:
        if isinstance(entry, str):
            addresses.append(_sentinel_address(entry, what, default))
        elif isinstance(entry, (tuple, list)) and len(entry) == 2:
            addresses.append((_check_host(entry[0], what), _check_port(entry[1], what)))
        else:
            raise ValueError(f"masters: bad {field} entry {entry!r} in {what}; expected (host, port)")
    return addresses


def _from_cluster_dict(d: dict, what: str) -> MasterSpec:
    seeds = _address_list(d, "cluster", _CLUSTER_KEYS, "a cluster's nodes are given in 'cluster'", what, 6379)
    if int(d.get("db") or 0) != 0:
        raise ValueError(f"masters: a cluster has only db 0, not {d.get('db')!r}, in {what}")
    return MasterSpec(None, 0, None, 0, _opt_str(d.get("username"), "username", what),
                      _opt_str(d.get("password"), "password", what), _dict_tls(d, what), None,
                      ClusterSpec(tuple(seeds)))


def _from_cluster_client(client: Any) -> MasterSpec:
    """A ``redis.cluster.RedisCluster``: its startup nodes and connection settings."""
    manager = client.nodes_manager
    kwargs = manager.connection_kwargs
    seeds = [(node.host, node.port) for node in manager.startup_nodes.values()]
    for node in manager.nodes_cache.values():
        if (node.host, node.port) not in seeds:
            seeds.append((node.host, node.port))
    keys = ["username", "password"]
    settings: dict = {"cluster": seeds}
    if is_tls_connection(kwargs.get("connection_class"), kwargs):
        settings["ssl"] = True
        keys += _TLS_KEYS
    settings.update((k, kwargs[k]) for k in keys if kwargs.get(k) is not None)
    return _from_cluster_dict(settings, f"RedisCluster({seeds[:3]})")


def _from_sentinel_dict(d: dict, what: str) -> MasterSpec:
    sentinels = _address_list(d, "sentinels", _SENTINEL_KEYS, "a Sentinel master's address is asked of its sentinels",
                              what, _SENTINEL_PORT)
    service = d.get("service")
    if not isinstance(service, str) or not service:
        raise ValueError(f"masters: missing or bad service name in {what}")
    tls = _dict_tls(d, what)
    sentinel = SentinelSpec(tuple(sentinels), service, _opt_str(d.get("sentinel_username"), "sentinel_username", what),
                            _opt_str(d.get("sentinel_password"), "sentinel_password", what),
                            _sentinel_tls(d, tls, what))
    return MasterSpec(None, 0, None, _check_db(d.get("db", 0), what), _opt_str(d.get("username"), "username", what),
                      _opt_str(d.get("password"), "password", what), tls, sentinel)


def _sentinel_tls(d: dict, master_tls: Optional[TlsOptions], what: str) -> Optional[TlsOptions]:
    """The sentinels' TLS options (``sentinel_ssl``), or None; their ``sentinel_ssl_*`` settings,
    else the master's ``ssl_*`` ones (one CA usually signs both), else the defaults."""
    own = {k[len("sentinel_"):]: d[k] for k in _SENTINEL_TLS_KEYS if d.get(k) is not None}
    if d.get("sentinel_ssl_context") is not None:
        own["ssl_context"] = d["sentinel_ssl_context"]
    if not d.get("sentinel_ssl"):
        if own:
            raise ValueError(f"masters: sentinel_ssl_* settings without sentinel_ssl=True in {what}")
        return None
    if own:
        return _tls_options(own, what)
    return master_tls if master_tls is not None else _tls_options({}, what)


def _from_sentinel_object(sentinel: Any, service: Any, settings: dict) -> MasterSpec:
    """A ``redis.sentinel.Sentinel`` and a service name; ``settings``: the master's own."""
    addresses: List[Any] = []
    login: dict = {}
    tls: dict = {}
    for client in sentinel.sentinels:
        pool = client.connection_pool
        kwargs = pool.connection_kwargs
        addresses.append((kwargs.get("host"), kwargs.get("port", _SENTINEL_PORT)))
        login = login or {k: kwargs[k] for k in ("username", "password") if kwargs.get(k) is not None}
        if not tls and is_tls_connection(getattr(pool, "connection_class", None), kwargs):
            tls = {f"sentinel_{k}": kwargs[k] for k in _TLS_KEYS if kwargs.get(k) is not None}
            tls["sentinel_ssl"] = True
    d = {k: v for k, v in settings.items() if k in _DICT_KEYS or k in _TLS_KEYS}
    d.update(sentinels=addresses, service=service)
    d.update((f"sentinel_{k}", v) for k, v in login.items())
    d.update(tls)
    return _from_sentinel_dict(d, f"Sentinel({addresses}) service {service!r}")


def split_urls(text: str) -> List[str]:
    """The URLs in a comma- or space-separated list (``FASTREDLOCK_MASTERS``, command lines); a
    Sentinel URL's own commas (``redis+sentinel://h1:p,h2:p/service``) are kept: a piece without
    ``://`` continues the URL before it."""
    urls: List[str] = []
    for word in text.split():
        pieces: List[str] = []
        for piece in word.split(","):
            if pieces and "://" not in piece and ("+sentinel://" in pieces[-1] or "+cluster://" in pieces[-1]):
                pieces[-1] += "," + piece
            elif piece:
                pieces.append(piece)
        urls.extend(pieces)
    return urls


def _safe(url: str) -> str:
    """The URL without its password, for messages (the one rule: :func:`fastredlock.io.redact.redact`)."""
    return redact(url)


def _from_dict(d: dict) -> MasterSpec:
    what = repr(redact_settings(d))
    if "sentinels" in d or "service" in d:
        return _from_sentinel_dict(d, what)
    if "cluster" in d:
        return _from_cluster_dict(d, what)
    unknown = set(d) - _DICT_KEYS - set(_TLS_KEYS)
    if unknown:
        raise ValueError(f"masters: unknown key(s) {sorted(unknown)} in {what}")
    db = _check_db(d.get("db", 0), what)
    username = _opt_str(d.get("username"), "username", what)
    password = _opt_str(d.get("password"), "password", what)
    path = d.get("path") or d.get("unix_socket_path")
    if path:
        return MasterSpec(None, 0, str(path), db, username, password)
    host = _check_host(d.get("host", "127.0.0.1"), what)
    tls = _dict_tls(d, what)
    return MasterSpec(host, _check_port(d.get("port", 6379), what), None, db, username, password, tls)


def _from_redis_client(client: Any) -> MasterSpec:
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    keys = ["host", "port", "db", "username", "password", "path"]
    settings = {}
    if is_tls_connection(getattr(pool, "connection_class", None), kwargs):
        settings["ssl"] = True
        keys += _TLS_KEYS
    settings.update((k, kwargs[k]) for k in keys if kwargs.get(k) is not None)
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None and hasattr(pool, "service_name"):  # Sentinel(...).master_for(service)
        return _from_sentinel_object(manager, pool.service_name, settings)
    return _from_dict(settings)


_ssl_classes: Optional[Tuple[type, ...]] = None


def _ssl_connection_classes() -> Tuple[type, ...]:
    """redis-py's (and its forks') TLS connection classes that are importable here (looked up once)."""
    global _ssl_classes
    if _ssl_classes is not None:
        return _ssl_classes
    found = []
    for module, name in (("redis.connection", "SSLConnection"), ("redis.asyncio.connection", "SSLConnection"),
                         ("valkey.connection", "SSLConnection"), ("valkey.asyncio.connection", "SSLConnection")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    _ssl_classes = tuple(found)
    return _ssl_classes


def is_tls_connection(conn_cls: Any, kwargs: dict) -> bool:
    """Whether a redis-py-style client's connections are TLS ones: its pool says ``ssl``, has
    ``ssl_*`` settings (only a TLS connection takes them), or its connection class is (a subclass
    of) redis-py's ``SSLConnection``; never judged by a class's name, which a subclass may choose
    freely (``class TLSConnection(SSLConnection)``)."""
    if kwargs.get("ssl") or any(kwargs.get(k) is not None for k in (*_TLS_KEYS, "ssl_context", "ssl_ca_data")):
        return True
    if not isinstance(conn_cls, type):
        return False
    classes = _ssl_connection_classes()
    if classes and issubclass(conn_cls, classes):
        return True
    # a redis-py-style library whose module this does not know: its class hierarchy, by base
    return any(base.__name__ == "SSLConnection" for base in conn_cls.__mro__)


def _is_sentinel(obj: Any) -> bool:
    """Whether ``obj`` looks like a ``redis.sentinel.Sentinel`` (its sentinels are redis clients)."""
    return isinstance(getattr(obj, "sentinels", None), list) and hasattr(obj, "discover_master")


def parse_master(master: Any) -> MasterSpec:
    """Describe one master; raise ``ValueError``/``TypeError`` naming ``masters`` if it is malformed."""
    if isinstance(master, MasterSpec):
        return master
    if isinstance(master, str):
        return _from_url(master)
    if isinstance(master, dict):
        return _from_dict(master)
    if isinstance(master, tuple):
        if len(master) != 2:
            raise ValueError(f"masters: a tuple must be (host, port), got {master!r}")
        host, port = master
        if _is_sentinel(host):  # (redis.sentinel.Sentinel(...), "service")
            settings = dict(host.connection_kwargs)
            return _from_sentinel_object(host, port, settings)
        what = repr(master)
        return MasterSpec(_check_host(host, what), _check_port(port, what), None, 0, None, None)
    if hasattr(master, "nodes_manager") and hasattr(master.nodes_manager, "startup_nodes"):
        return _from_cluster_client(master)
    if hasattr(master, "connection_pool") and hasattr(master.connection_pool, "connection_kwargs"):
        return _from_redis_client(master)
    if _is_sentinel(master):
        raise TypeError("masters: pass a redis.sentinel.Sentinel with its service name: (sentinel, \"mymaster\")")
    raise TypeError(
        "masters: each master must be a URL string, a dict, a (host, port) tuple, a redis.Redis "
        f"client or a (redis.sentinel.Sentinel, service) tuple, not {type(master).__name__}"
    )


def addresses_of(spec: MasterSpec) -> "set[tuple]":
    """Every address a master's host resolves to (the host itself where it does not resolve)."""
    if spec.path is not None:
        return {("unix", os.path.realpath(spec.path))}
    if spec.sentinel is not None:  # one service of one set of sentinels: asked for the same master
        return {("sentinel", spec.sentinel.service, address) for address in spec.sentinel.sentinels}
    if spec.cluster is not None:  # one cluster, however its nodes are named
        return {("cluster", address) for address in spec.cluster.seeds}
    try:
        infos = socket.getaddrinfo(spec.host, spec.port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return {(spec.host, spec.port)}
    return {info[4][:2] for info in infos}


def parse_masters(masters: Iterable[Any], ssl_context: Any = None, *, same_server_ok: bool = False) -> Tuple[MasterSpec, ...]:
    """Describe every master; reject an empty list and duplicates (they would fake a quorum).

    ``ssl_context``: an ``ssl.SSLContext`` for every TLS master that gives no TLS settings of its own.

    Two entries are the same server when their addresses overlap once host names are resolved
    (``localhost`` and ``127.0.0.1``), whatever their db: one server should vote once, and a
    restart of it would forget every db's lock at once. ``same_server_ok=True`` accepts several
    dbs of one server (a common CI setup): each db holds its own key and casts its own vote, so
    mutual exclusion still holds (two holders would need a majority of the same dbs, on one
    server), but there is no fault tolerance: that server is a single point of failure. The same
    db of one server twice is refused either way (its second SET could never succeed).
    """
    if isinstance(masters, (str, bytes, dict)) or not hasattr(masters, "__iter__"):
        raise TypeError("masters: expected a list of masters (URLs, dicts, tuples or redis.Redis clients)")
    specs: List[MasterSpec] = [parse_master(m) for m in masters]
    if ssl_context is not None:
        context_for(TlsOptions(context=ssl_context))  # checks its type
        specs = [s._replace(tls=TlsOptions(context=ssl_context)) if s.tls is not None and s.tls.is_default()
                 else s for s in specs]
        # TLS sentinels without settings of their own take it too (each checked against its host)
        specs = [s._replace(sentinel=s.sentinel._replace(tls=TlsOptions(context=ssl_context)))
                 if s.sentinel is not None and s.sentinel.tls is not None and s.sentinel.tls.is_default()
                 else s for s in specs]
    if not specs:
        raise ValueError("masters: at least one master is required")
    seen: "dict[tuple, MasterSpec]" = {}
    for spec in specs:
        addresses = addresses_of(spec)
        for address in addresses:
            other = seen.get(address)
            if other is None:
                continue
            if other.db == spec.db:
                raise ValueError(
                    f"masters: {spec.label} and {other.label} are the same server and db; one key must "
                    "not vote twice"
                )
            if not same_server_ok:
                raise ValueError(
                    f"masters: {spec.label} and {other.label} are the same server; one server must not "
                    "vote twice (pass same_server_ok=True to accept several dbs of one server, without "
                    "fault tolerance)"
                )
        seen.update((address, spec) for address in addresses)
    return tuple(specs)


def shared_servers(specs: Iterable[MasterSpec]) -> List[Tuple[MasterSpec, ...]]:
    """The groups of masters (two or more) that are dbs of one server, in the order given."""
    groups: "dict[frozenset, List[MasterSpec]]" = {}
    for spec in specs:
        addresses = frozenset(addresses_of(spec))
        for key in list(groups):
            if key & addresses:
                groups[key].append(spec)
                break
        else:
            groups[addresses] = [spec]
    return [tuple(group) for group in groups.values() if len(group) > 1]
