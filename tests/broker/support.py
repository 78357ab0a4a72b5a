"""Helpers shared by the broker's in-process tests."""


class RecordingTransport:
    """A transport that keeps what the broker wrote, for tests that drive a ServerConnection without a socket."""

    def __init__(self):
        self.written = b""
        self.writes = 0  # transport writes, each a send() on a socket
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data
        self.writes += 1

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name):
        return ("127.0.0.1", 1234) if name == "peername" else None

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        self.write_buffer_limits = (high, low)
