"""Codec errors (to be folded into magnetar.errors). Malformed input is not retriable."""


class ProtocolError(Exception):
    retriable = False


class FrameTooLarge(ProtocolError):
    pass
