"""The I/O layer: sockets, and nothing else that decides.

What lives here: the core selector (:mod:`.cores`), the C twin (``core_c.pyx`` over ``encode_c.pyx``
and the ``*.h`` headers: non-blocking fds, ``poll(2)`` without the GIL, an exact-reply parser) and the
pure twin (:mod:`.core_py`: ``socket``/``select``), the reply readers (:mod:`.reader`: hiredis or
:mod:`.reader_py`), TLS (:mod:`.tls`), URL and spec parsing (:mod:`.masters`), the side connections
that resolve a master (:mod:`.sentinel`, :mod:`.cluster`) and blocking one-shot connections
(:mod:`.blocking`). Every rule of a round lives in :mod:`fastredlock.protocol`, the only package
these modules import besides the standard library and hiredis; so does the round's drive: each twin's
``Core`` is a :class:`fastredlock.protocol.driver.Driver` and adds only the I/O it calls back
(``carry_out`` a link's requests, ``receive``, ``serve``, ``wait_and_serve``, ...).

Keep this file free of imports: :mod:`fastredlock._pure` loads ``io.core_py`` interpreted under its
own name, and with it this package's ``__init__``.
"""
