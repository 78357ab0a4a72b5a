"""Codec errors, part of the client's one hierarchy (magnetar.errors). Malformed input is not retriable."""

from magnetar.errors import MagnetarError


class ProtocolError(MagnetarError):
    retriable = False


class FrameTooLarge(ProtocolError):
    pass
