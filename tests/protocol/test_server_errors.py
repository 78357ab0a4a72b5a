"""The one ServerError table and the client's classes bound through it (pure, no sockets)."""

import pytest

import magnetar
from magnetar import errors
from magnetar.protocol import pb
from magnetar.protocol.server_errors import SERVER_ERRORS, ServerErrorRegistry


def test_every_server_error_code_has_exactly_one_row_under_its_protocol_name():
    codes = [value.number for value in pb.ServerError.DESCRIPTOR.values]
    assert sorted(SERVER_ERRORS) == sorted(codes) and len(set(codes)) == len(codes)
    for code, row in SERVER_ERRORS.items():
        assert row.code == code and row.name == pb.ServerError.Name(code)


@pytest.mark.parametrize("code, retriable", [
    (pb.UnknownError, False), (pb.MetadataError, True), (pb.PersistenceError, True), (pb.ServiceNotReady, True),
    (pb.TooManyRequests, True), (pb.ProducerBusy, False), (pb.TopicNotFound, False), (pb.ProducerFenced, False),
    (pb.ConsumerBusy, False), (pb.NotAllowedError, False), (pb.AuthenticationError, False),
])
def test_retriable_codes(code, retriable):
    assert SERVER_ERRORS[code].retriable is retriable


# The official client's names (pulsar.ProducerBusy, ...) as magnetar has always spelled them, and their Result.
CLIENT_CLASSES = {
    pb.UnknownError: ("UnknownError", magnetar.Result.UnknownError),
    pb.MetadataError: ("BrokerMetadataError", magnetar.Result.BrokerMetadataError),
    pb.PersistenceError: ("BrokerPersistenceError", magnetar.Result.BrokerPersistenceError),
    pb.ConsumerBusy: ("ConsumerBusy", magnetar.Result.ConsumerBusy),
    pb.ServiceNotReady: ("ServiceNotReady", magnetar.Result.ServiceUnitNotReady),
    pb.ChecksumError: ("ChecksumError", magnetar.Result.ChecksumError),
    pb.UnsupportedVersionError: ("UnsupportedVersionError", magnetar.Result.UnsupportedVersionError),
    pb.TopicNotFound: ("TopicNotFound", magnetar.Result.TopicNotFound),
    pb.SubscriptionNotFound: ("SubscriptionNotFound", magnetar.Result.SubscriptionNotFound),
    pb.ConsumerNotFound: ("ConsumerNotFound", magnetar.Result.ConsumerNotFound),
    pb.TooManyRequests: ("TooManyRequests", magnetar.Result.TooManyLookupRequestException),
    pb.TopicTerminatedError: ("TopicTerminated", magnetar.Result.TopicTerminated),
    pb.ProducerBusy: ("ProducerBusy", magnetar.Result.ProducerBusy),
    pb.InvalidTopicName: ("InvalidTopicName", magnetar.Result.InvalidTopicName),
    pb.IncompatibleSchema: ("IncompatibleSchema", magnetar.Result.IncompatibleSchema),
    pb.ConsumerAssignError: ("ConsumerAssignError", magnetar.Result.ConsumerAssignError),
    pb.NotAllowedError: ("NotAllowed", magnetar.Result.NotAllowedError),
    pb.ProducerFenced: ("ProducerFenced", magnetar.Result.ProducerFenced),
    pb.AuthenticationError: ("AuthenticationError", magnetar.Result.AuthenticationError),
    pb.AuthorizationError: ("AuthorizationError", magnetar.Result.AuthorizationError),
    pb.ProducerBlockedQuotaExceededError: ("ProducerBlockedQuotaExceededError",
                                           magnetar.Result.ProducerBlockedQuotaExceededError),
    pb.ProducerBlockedQuotaExceededException: ("ProducerBlockedQuotaExceededException",
                                               magnetar.Result.ProducerBlockedQuotaExceededException),
}


@pytest.mark.parametrize("code", sorted(CLIENT_CLASSES))
def test_client_class_for_each_code_keeps_its_name_result_and_the_tables_flags(code):
    name, result = CLIENT_CLASSES[code]
    exc = errors.for_code(code, "why")
    assert type(exc) is getattr(magnetar, name) and type(exc).__name__ == name
    assert str(exc) == "why" and errors.result_of(exc) == result
    assert exc.code == code and exc.retriable is SERVER_ERRORS[code].retriable
    assert isinstance(exc, magnetar.PulsarException)


def test_client_binds_exactly_those_codes_and_unknown_codes_fall_back():
    assert set(errors._REGISTRY.bound()) == set(CLIENT_CLASSES)
    assert type(errors.for_code(pb.TransactionConflict)) is magnetar.UnknownError
    assert str(errors.for_code(9999)) == "UnknownError"
    assert str(errors.for_code(pb.ProducerBusy)) == "ProducerBusy"  # no message on the wire: the class's name


def test_registry_refuses_a_second_class_for_a_code_and_a_code_not_in_the_table():
    registry = ServerErrorRegistry(describe=lambda cls, code: "")
    registry.register(pb.ProducerBusy)(type("A", (Exception,), {}))
    with pytest.raises(ValueError, match="ProducerBusy already bound to A"):
        registry.register(pb.ProducerBusy)(type("B", (Exception,), {}))
    with pytest.raises(ValueError, match="not a ServerError code"):
        registry.register(4242)


def test_registry_copies_the_row_onto_the_class():
    registry = ServerErrorRegistry(describe=lambda cls, code: f"{cls.__name__}/{code}")
    unknown = registry.register(pb.UnknownError)(type("Unknown", (Exception,), {}))
    busy = registry.register(pb.ServiceNotReady)(type("Busy", (Exception,), {}))
    assert (busy.code, busy.retriable, busy.http_status) == (pb.ServiceNotReady, True, 500)
    assert type(registry.for_code(77)) is unknown and str(registry.for_code(77)) == "Unknown/77"


@pytest.mark.parametrize("module", ["magnetar.protocol.server_errors", "magnetar.errors", "magnetar.protocol.errors",
                                    "magnetar.protocol", "magnetar.asyncio.connection"])
def test_each_module_imports_first_in_a_fresh_interpreter(module):
    # Whichever of magnetar.errors, magnetar.protocol and their modules a program names first must work.
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", f"import {module}; import magnetar; magnetar.errors.for_code(16)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
