"""The names of Cython's pure-mode module the package uses, where Cython is not installed (a pure
install): ``cython.cast`` (the protocol's compiled loops cast the links they read without a type
check; interpreted, a cast is the value itself) and the class decorators ``cclass`` and
``freelist`` (compiled, a freelist; interpreted, the class as it is)."""


class cython:  # noqa: N801 - stands in for the module of that name
    """The names of Cython's pure-mode module the protocol uses."""

    compiled = False

    @staticmethod
    def cast(type_, value, typecheck=True):
        """``value`` itself."""
        return value

    @staticmethod
    def cclass(cls):
        """``cls`` itself."""
        return cls

    @staticmethod
    def freelist(size):
        """A decorator that returns the class as it is."""
        return lambda cls: cls
