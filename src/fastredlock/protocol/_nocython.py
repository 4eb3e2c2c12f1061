"""``cython.cast`` where Cython is not installed (a pure install): the protocol's compiled loops
cast the links they read without a type check; interpreted, a cast is the value itself."""


class cython:  # noqa: N801 - stands in for the module of that name
    """The names of Cython's pure-mode module the protocol uses."""

    compiled = False

    @staticmethod
    def cast(type_, value, typecheck=True):
        """``value`` itself."""
        return value
