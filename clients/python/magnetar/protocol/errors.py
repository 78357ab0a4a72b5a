"""Codec errors, part of the client's one hierarchy (magnetar.errors). Malformed input is not retriable."""

from magnetar.error_root import MagnetarError


class ProtocolError(MagnetarError):
    retriable = False


class FrameTooLarge(ProtocolError):
    pass
