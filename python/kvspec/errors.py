"""The exceptions of kvspec, shared by the compiled module and pure Python."""


class Refused(RuntimeError):
    """An operation the cache refused (kvspec's non-ok Status).

    The message is the library's. A refused operation leaves the state it was
    called on exactly as it was: that is part of the contract, and the
    conformance runner checks it for every ``expect error`` statement.
    """


class NotApplicable(Exception):
    """Raised by an adapter for a statement its engine cannot express.

    The runner then reports the whole trace as ``not applicable: <reason>``;
    it is never silently skipped.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TraceSyntaxError(ValueError):
    """A trace the parser rejects: ``FILE:LINE:COL: message``."""
