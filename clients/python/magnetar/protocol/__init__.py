"""Pure Pulsar binary protocol: the frame codec and the session (bytes in -> events out, commands in -> bytes out)."""
from . import pulsar_api_pb2 as pb
from .errors import FrameTooLarge, ProtocolError
from .frames import (Frame, FrameDecoder, encode_command, encode_payload_command,
                     command, pack_batch, split_batch, unpack_batch)
from .session import PulsarSession, Role

__all__ = ["pb", "Frame", "FrameDecoder", "FrameTooLarge", "ProtocolError",
           "encode_command", "encode_payload_command", "pack_batch", "split_batch", "unpack_batch", "command",
           "PulsarSession", "Role"]
