"""Broker errors: bound through the one ServerError table, mapped to HTTP statuses, and the storage seam (pure)."""

import json

import pytest

from broker import errors as be
from broker.http.admin import BadRequest, error_response
from broker.ownership.resources import ConflictError, NotFoundError
from magnetar import errors as ce
from magnetar.protocol import pb
from magnetar.protocol.server_errors import SERVER_ERRORS
from storage.errors import (
    BadVersionError, BookieUnavailableError, ManagedLedgerClosedError, MetadataConnectionError, NoNodeError, StorageError,
)


def test_broker_and_client_bind_the_same_codes_with_the_same_flags():
    broker_classes, client_classes = be._REGISTRY.bound(), ce._REGISTRY.bound()
    assert set(broker_classes) == set(client_classes)
    for code, broker_cls in broker_classes.items():
        client_cls = client_classes[code]
        assert broker_cls.code == client_cls.code == code
        assert broker_cls.retriable is client_cls.retriable is SERVER_ERRORS[code].retriable
        assert broker_cls.http_status == SERVER_ERRORS[code].http_status


@pytest.mark.parametrize("broker_cls, client_cls", [
    (be.BrokerError, ce.UnknownError), (be.BrokerMetadataError, ce.BrokerMetadataError),
    (be.PersistenceError, ce.BrokerPersistenceError), (be.ConsumerBusyError, ce.ConsumerBusy),
    (be.ServiceNotReadyError, ce.ServiceNotReady), (be.TopicFencedError, ce.ServiceNotReady),
    (be.ChecksumError, ce.ChecksumError), (be.UnsupportedVersionError, ce.UnsupportedVersionError),
    (be.TopicNotFoundError, ce.TopicNotFound), (be.SubscriptionNotFoundError, ce.SubscriptionNotFound),
    (be.ConsumerNotFoundError, ce.ConsumerNotFound), (be.TooManyRequestsError, ce.TooManyRequests),
    (be.TopicTerminatedError, ce.TopicTerminated), (be.ProducerBusyError, ce.ProducerBusy),
    (be.InvalidTopicNameError, ce.InvalidTopicName), (be.IncompatibleSchemaError, ce.IncompatibleSchema),
    (be.ConsumerAssignError, ce.ConsumerAssignError), (be.NotAllowedError, ce.NotAllowed),
    (be.ProducerFencedError, ce.ProducerFenced), (be.AuthorizationError, ce.AuthorizationError),
    (be.AuthenticationError, ce.AuthenticationError), (ConflictError, ce.NotAllowed), (NotFoundError, ce.TopicNotFound),
])
def test_a_broker_error_reaches_the_client_as_its_class(broker_cls, client_cls):
    sent = broker_cls("why")
    received = ce.for_code(sent.code, str(sent))
    assert type(received) is client_cls and str(received) == "why" and received.retriable is sent.retriable
    assert type(be.for_code(received.code)) is be._REGISTRY.class_for(broker_cls.code)


def test_broker_for_code_falls_back_to_broker_error_with_the_class_doc():
    assert type(be.for_code(pb.TransactionConflict)) is be.BrokerError
    assert str(be.for_code(pb.ProducerFenced)) == be.ProducerFencedError.__doc__
    assert str(be.for_code(pb.ProducerBusy, "taken")) == "taken"


@pytest.mark.parametrize("code, status", [
    (pb.InvalidTopicName, 412), (pb.TopicNotFound, 404), (pb.SubscriptionNotFound, 404), (pb.NotAllowedError, 405),
    (pb.ConsumerBusy, 412),
    (pb.AuthorizationError, 403), (pb.UnknownError, 500), (pb.MetadataError, 500), (pb.PersistenceError, 500), (pb.ServiceNotReady, 500),
])
def test_http_status_of_the_codes_the_admin_rest_uses(code, status):
    assert SERVER_ERRORS[code].http_status == status


@pytest.mark.parametrize("exc, status, reason", [
    (be.InvalidTopicNameError("bad name"), 412, "bad name"),
    (be.InvalidBundleError("bad range"), 412, "bad range"),
    (be.TopicNotFoundError("no topic"), 404, "no topic"),
    (be.SubscriptionNotFoundError("no sub"), 404, "no sub"),
    (NotFoundError("no tenant"), 404, "no tenant"),
    (ConflictError("exists"), 409, "exists"),
    (be.NotAllowedError("not now"), 405, "not now"),
    (BadRequest("not JSON"), 400, "not JSON"),
    (be.ServiceNotReadyError("moving"), 500, "moving"),
    (be.TopicFencedError("moved"), 500, "moved"),
    (be.BrokerMetadataError("zk down"), 500, "zk down"),
    (ValueError("boom"), 500, "ValueError: boom"),
])
def test_admin_error_response_status_and_reason(exc, status, reason):
    response = error_response(exc)
    assert response.status == status and json.loads(response.body) == {"reason": reason}


def test_persistence_errors_turns_any_storage_error_into_a_persistence_error():
    cause = ManagedLedgerClosedError("ledger closed")
    with pytest.raises(be.PersistenceError) as caught:
        with be.persistence_errors("ack on sub failed"):
            raise cause
    assert str(caught.value) == "ack on sub failed: ledger closed" and caught.value.__cause__ is cause
    with pytest.raises(be.PersistenceError, match="^opening: session lost$"):
        with be.persistence_errors("opening"):
            raise MetadataConnectionError("session lost")


def test_metadata_errors_turns_only_metadata_errors_into_broker_metadata_errors():
    cause = MetadataConnectionError("session lost")
    with pytest.raises(be.BrokerMetadataError) as caught:
        with be.metadata_errors("reading /x"):
            raise cause
    assert str(caught.value) == "reading /x: session lost" and caught.value.__cause__ is cause
    with pytest.raises(BookieUnavailableError):
        with be.metadata_errors("reading /x"):
            raise BookieUnavailableError("not metadata")


def test_the_seam_lets_broker_errors_and_handled_subclasses_through():
    with pytest.raises(be.TopicNotFoundError, match="^gone$"):
        with be.metadata_errors("reading /x"):
            try:
                raise NoNodeError("/x")
            except NoNodeError:
                raise be.TopicNotFoundError("gone") from None
    with be.metadata_errors("writing /x"):
        try:
            raise BadVersionError("/x")
        except BadVersionError:
            pass
    assert isinstance(be.from_storage(StorageError("disk"), ""), be.PersistenceError)
    assert str(be.from_storage(StorageError("disk"), "")) == "disk"
