"""Codec and session errors, part of the client's one hierarchy (magnetar.errors). Malformed input is not retriable."""

from magnetar.error_root import MagnetarError


class ProtocolError(MagnetarError):
    retriable = False


class FrameTooLarge(ProtocolError):
    pass


class ProtocolViolation(ProtocolError):
    """The peer (or our own code) broke the session's rules; ``command`` is the offending BaseCommand type,
    ``frame`` the received frame that did it (None for a command we were about to send)."""

    frame = None

    def __init__(self, message: str, command: int | None = None):
        super().__init__(message)
        self.command = command


class CommandBeforeConnect(ProtocolViolation):
    """A server received a command other than the handshake before the session was connected."""


class DuplicateConnect(ProtocolViolation):
    """A second CONNECT (or CONNECTED) on a session that is already connected."""


class UnknownRequestId(ProtocolViolation):
    """A response whose request id answers no request outstanding on this session."""


class IllegalTransition(ProtocolViolation):
    """A command that the session's transition tables do not allow in the current state."""


class SessionClosed(ProtocolError):
    """Bytes were asked for on a session that is already closed."""
