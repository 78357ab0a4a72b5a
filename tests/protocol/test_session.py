"""PulsarSession without sockets: byte vectors in, events and bytes out, one table row per transition."""

from __future__ import annotations

import pytest

from magnetar.protocol import pb
from magnetar.protocol.errors import (CommandBeforeConnect, DuplicateConnect, FrameTooLarge, IllegalTransition,
                                      ProtocolError, ProtocolViolation, SessionClosed, UnknownRequestId)
from magnetar.protocol.frames import Frame, command, encode_command
from magnetar.protocol.session import (CONSUMER_TRANSITIONS, HANDLE_TRANSITIONS, SESSION_TRANSITIONS, Connected, ConnectRefused,
                                       HandleState, KeepAlive, PulsarSession, Response, Role, SessionState)

T = pb.BaseCommand
CONNECT = command(T.CONNECT, connect=pb.CommandConnect(client_version="t", protocol_version=20))
CONNECTED = command(T.CONNECTED, connected=pb.CommandConnected(server_version="s", protocol_version=20))
AUTH_CHALLENGE = command(T.AUTH_CHALLENGE, authChallenge=pb.CommandAuthChallenge())
AUTH_RESPONSE = command(T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse())
CONNECT_ERROR = command(T.ERROR, error=pb.CommandError(request_id=0, error=pb.UnsupportedVersionError, message="old"))
PING = command(T.PING, ping=pb.CommandPing())


def producer(pid=1, rid=10):
    return command(T.PRODUCER, producer=pb.CommandProducer(topic="persistent://p/n/t", producer_id=pid, request_id=rid))


def subscribe(cid=2, rid=11):
    return command(T.SUBSCRIBE, subscribe=pb.CommandSubscribe(topic="persistent://p/n/t", subscription="s",
                                                               subType=pb.CommandSubscribe.Shared, consumer_id=cid,
                                                               request_id=rid))


def producer_success(rid=10, ready=True):
    return command(T.PRODUCER_SUCCESS, producer_success=pb.CommandProducerSuccess(
        request_id=rid, producer_name="p", producer_ready=ready))


def success(rid):
    return command(T.SUCCESS, success=pb.CommandSuccess(request_id=rid))


def error(rid, code=pb.ProducerBusy):
    return command(T.ERROR, error=pb.CommandError(request_id=rid, error=code, message="no"))


def close_producer(pid=1, rid=0):
    return command(T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(producer_id=pid, request_id=rid))


def close_consumer(cid=2, rid=0):
    return command(T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(consumer_id=cid, request_id=rid))


def unsubscribe(cid=2, rid=12):
    return command(T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(consumer_id=cid, request_id=rid))


def lookup(rid=5):
    return command(T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic="persistent://p/n/t", request_id=rid))


def lookup_response(rid=5):
    return command(T.LOOKUP_RESPONSE, lookupTopicResponse=pb.CommandLookupTopicResponse(request_id=rid))


def receive(session: PulsarSession, data: bytes) -> list:
    session.receive_data(data)
    events = []
    while (event := session.next_event()) is not None:
        events.append(event)
    return events


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def connected(role: Role, clock=None) -> PulsarSession:
    s = PulsarSession(role, keep_alive_s=30, clock=clock or Clock())
    if role is Role.CLIENT:
        s.send(CONNECT)
        receive(s, encode_command(CONNECTED))
    else:
        receive(s, encode_command(CONNECT))
        s.send(CONNECTED)
    assert s.state is SessionState.CONNECTED
    return s


def run(session: PulsarSession, steps):
    """Steps are ("send", cmd) or ("recv", cmd); returns the events of the receives, in order."""
    events = []
    for direction, cmd in steps:
        if direction == "send":
            assert session.send(cmd) == encode_command(cmd)  # the session never changes what it encodes
        else:
            events += receive(session, encode_command(cmd))
    return events


# ---- the handshake: every row of SESSION_TRANSITIONS ------------------------------------------------------

HANDSHAKE_ROWS = [
    # role, steps, final state, kinds of events
    (Role.CLIENT, [("send", CONNECT)], SessionState.AWAIT_CONNECT, []),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED)], SessionState.CONNECTED, [Connected]),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECT_ERROR)], SessionState.CLOSED, [ConnectRefused]),
    (Role.CLIENT, [("send", CONNECT), ("recv", AUTH_CHALLENGE)], SessionState.AUTHENTICATING, [Frame]),
    (Role.CLIENT, [("send", CONNECT), ("recv", AUTH_CHALLENGE), ("send", AUTH_RESPONSE), ("recv", AUTH_CHALLENGE)],
     SessionState.AUTHENTICATING, [Frame, Frame]),
    (Role.CLIENT, [("send", CONNECT), ("recv", AUTH_CHALLENGE), ("send", AUTH_RESPONSE), ("recv", CONNECTED)],
     SessionState.CONNECTED, [Frame, Connected]),
    (Role.CLIENT, [("send", CONNECT), ("recv", AUTH_CHALLENGE), ("recv", CONNECT_ERROR)], SessionState.CLOSED,
     [Frame, ConnectRefused]),
    (Role.SERVER, [("recv", CONNECT)], SessionState.AWAIT_CONNECT, [Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED)], SessionState.CONNECTED, [Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECT_ERROR)], SessionState.CLOSED, [Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", AUTH_CHALLENGE)], SessionState.AUTHENTICATING, [Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", AUTH_CHALLENGE), ("recv", AUTH_RESPONSE), ("send", AUTH_CHALLENGE)],
     SessionState.AUTHENTICATING, [Frame, Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", AUTH_CHALLENGE), ("recv", AUTH_RESPONSE), ("send", CONNECTED)],
     SessionState.CONNECTED, [Frame, Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", AUTH_CHALLENGE), ("send", CONNECT_ERROR)], SessionState.CLOSED, [Frame]),
    # refreshing an expired credential on a live session: it stays CONNECTED
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED), ("recv", AUTH_CHALLENGE), ("send", AUTH_RESPONSE)],
     SessionState.CONNECTED, [Connected, Frame]),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED), ("send", AUTH_CHALLENGE), ("recv", AUTH_RESPONSE)],
     SessionState.CONNECTED, [Frame, Frame]),
]


@pytest.mark.parametrize("role,steps,state,kinds", HANDSHAKE_ROWS)
def test_handshake(role, steps, state, kinds):
    session = PulsarSession(role, clock=Clock())
    events = run(session, steps)
    assert [type(e) for e in events] == kinds
    assert session.state is state


def test_every_handshake_transition_is_exercised():
    seen = set()
    for role, steps, _, _ in HANDSHAKE_ROWS:
        session = PulsarSession(role, clock=Clock())
        for direction, cmd in steps:
            before = session.state
            run(session, [(direction, cmd)])
            seen.add((role, before, "sent" if direction == "send" else "received", cmd.type))
    assert seen == set(SESSION_TRANSITIONS)


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_a_refresh_leaves_producers_consumers_and_requests_alone(role):
    """AUTH_CHALLENGE / AUTH_RESPONSE in the middle of traffic: handles and outstanding requests are untouched,
    and commands keep flowing both ways while the challenge is open."""
    session = connected(role)
    mirror = (lambda d: d) if role is Role.CLIENT else (lambda d: _MIRROR[d])
    run(session, [(mirror("send"), producer(1, 10)), (mirror("recv"), producer_success(10)),
                  (mirror("send"), lookup(5))])
    run(session, [(mirror("recv"), AUTH_CHALLENGE), (mirror("recv"), PING) if role is Role.CLIENT else
                  (mirror("send"), lookup_response(5)), (mirror("send"), AUTH_RESPONSE)])
    assert session.state is SessionState.CONNECTED and session.producer_state(1) is HandleState.READY
    if role is Role.CLIENT:
        assert session.outstanding() == {5}
        [event] = receive(session, encode_command(lookup_response(5)))
        assert type(event) is Response


def test_connected_and_refused_carry_what_the_broker_said():
    session = PulsarSession(Role.CLIENT, clock=Clock())
    session.send(CONNECT)
    [event] = receive(session, encode_command(CONNECT_ERROR))
    assert (event.error, event.message) == (pb.UnsupportedVersionError, "old")
    session = PulsarSession(Role.CLIENT, clock=Clock())
    [event] = receive(session, encode_command(CONNECTED))
    assert event.frame.command.connected.server_version == "s" and session.protocol_version == 20


def test_frames_split_across_reads_come_out_whole():
    session = PulsarSession(Role.SERVER, clock=Clock())
    data = encode_command(CONNECT)
    assert receive(session, data[:3]) == [] and receive(session, data[3:7]) == []
    [frame] = receive(session, data[7:])
    assert frame.command.type == T.CONNECT and session.protocol_version == 20


# ---- protocol violations ---------------------------------------------------------------------------------

VIOLATIONS = [
    # role, steps before, the step that violates, error
    (Role.SERVER, [], ("recv", PING), CommandBeforeConnect),
    (Role.SERVER, [], ("recv", producer()), CommandBeforeConnect),
    (Role.SERVER, [("recv", CONNECT), ("send", AUTH_CHALLENGE)], ("recv", lookup()), CommandBeforeConnect),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED)], ("recv", CONNECT), DuplicateConnect),
    (Role.SERVER, [], ("recv", AUTH_RESPONSE), IllegalTransition),
    (Role.SERVER, [], ("send", CONNECT), IllegalTransition),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED)], ("send", CONNECTED), DuplicateConnect),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED)], ("recv", CONNECTED), DuplicateConnect),
    (Role.CLIENT, [], ("send", AUTH_RESPONSE), IllegalTransition),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED)], ("send", AUTH_CHALLENGE), IllegalTransition),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED)], ("recv", AUTH_RESPONSE), IllegalTransition),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED)], ("recv", AUTH_CHALLENGE), IllegalTransition),
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED)], ("send", AUTH_RESPONSE), IllegalTransition),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED)], ("recv", success(99)), UnknownRequestId),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED)], ("recv", lookup_response(5)), UnknownRequestId),
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED), ("send", lookup(5)), ("recv", lookup_response(5))],
     ("recv", lookup_response(5)), UnknownRequestId),  # answered twice
    (Role.CLIENT, [("send", CONNECT), ("recv", CONNECTED), ("send", producer())], ("send", producer(rid=20)),
     IllegalTransition),  # a second create of a producer still being created
    (Role.SERVER, [("recv", CONNECT), ("send", CONNECTED), ("recv", producer())], ("recv", producer(rid=20)),
     IllegalTransition),
]


@pytest.mark.parametrize("role,before,step,exc", VIOLATIONS)
def test_violation_raises_a_specific_error(role, before, step, exc):
    session = PulsarSession(role, clock=Clock())
    run(session, before)
    state = session.state
    with pytest.raises(exc) as info:
        run(session, [step])
    assert isinstance(info.value, ProtocolViolation) and info.value.command == step[1].type
    assert session.state is state  # a violation moves nothing


def test_frames_around_a_violation_are_not_lost():
    session = connected(Role.CLIENT)
    session.send(lookup(5))
    session.receive_data(encode_command(PING) + encode_command(success(99)) + encode_command(lookup_response(5)))
    assert session.next_event().command.type == T.PING
    with pytest.raises(UnknownRequestId):
        session.next_event()
    response = session.next_event()
    assert type(response) is Response and response.request_id == 5
    assert session.next_event() is None


def test_a_server_judges_each_frame_after_the_one_before_was_answered():
    """CONNECT and PRODUCER in one read: the PRODUCER is judged once the application has sent CONNECTED."""
    session = PulsarSession(Role.SERVER, clock=Clock())
    session.receive_data(encode_command(CONNECT) + encode_command(producer()))
    assert session.next_event().command.type == T.CONNECT
    session.send(CONNECTED)
    assert session.next_event().command.type == T.PRODUCER
    assert session.producer_state(1) is HandleState.CREATING


def test_a_pipelined_command_before_connected_is_a_violation():
    session = PulsarSession(Role.SERVER, clock=Clock())
    session.receive_data(encode_command(CONNECT) + encode_command(producer()))
    assert session.next_event().command.type == T.CONNECT
    with pytest.raises(CommandBeforeConnect):
        session.next_event()


@pytest.mark.parametrize("data,exc", [
    (b"\x7f\xff\xff\xff", FrameTooLarge),
    (b"\x00\x00\x00\x05\x00\x00\x00\x09\x00", ProtocolError),  # commandSize > totalSize
    (b"\x00\x00\x00\x06\x00\x00\x00\x02\xff\xff", ProtocolError),  # not a BaseCommand
])
def test_bad_bytes_raise_a_protocol_error(data, exc):
    with pytest.raises(exc):
        PulsarSession(Role.SERVER, clock=Clock()).receive_data(data)


def test_nothing_is_received_or_sent_after_close():
    session = connected(Role.SERVER)
    session.send(lookup_response(1))
    assert session.close() == []
    assert receive(session, encode_command(PING)) == []
    with pytest.raises(SessionClosed):
        session.send(PING)


def test_close_returns_the_requests_never_answered():
    session = connected(Role.CLIENT)
    session.send(lookup(5))
    session.send(producer(1, 6))
    assert sorted(session.close()) == [5, 6]
    assert session.producer_state(1) is HandleState.CLOSED


def test_a_client_takes_the_brokers_commands_before_connected():
    """The client's own code orders its commands (open() hands a connection out once CONNECTED)."""
    session = PulsarSession(Role.CLIENT, clock=Clock())
    msg = command(T.MESSAGE, message=pb.CommandMessage(consumer_id=7, message_id=pb.MessageIdData(ledgerId=1, entryId=2)))
    [frame] = receive(session, encode_command(msg))
    assert frame.command.message.consumer_id == 7
    session.send(command(T.FLOW, flow=pb.CommandFlow(consumer_id=7, messagePermits=10)))


# ---- request ids ---------------------------------------------------------------------------------------------

def test_responses_are_matched_to_requests_in_any_order():
    session = connected(Role.CLIENT)
    ids = [session.next_request_id() for _ in range(3)]
    assert ids == [0, 1, 2]
    for rid in ids:
        session.send(lookup(rid))
    assert session.outstanding() == {0, 1, 2}
    events = receive(session, b"".join(encode_command(lookup_response(rid)) for rid in (2, 0, 1)))
    assert [(type(e), e.request_id, e.type) for e in events] == [(Response, r, T.LOOKUP_RESPONSE) for r in (2, 0, 1)]
    assert events[0].body.request_id == 2 and session.outstanding() == set()


def test_an_error_answers_the_request_it_names():
    session = connected(Role.CLIENT)
    session.send(lookup(5))
    [event] = receive(session, encode_command(error(5, pb.TopicNotFound)))
    assert (event.type, event.body.error) == (T.ERROR, pb.TopicNotFound)


def test_an_abandoned_request_is_forgotten():
    session = connected(Role.CLIENT)
    session.send(lookup(5))
    session.abandon(5)
    with pytest.raises(UnknownRequestId):
        receive(session, encode_command(lookup_response(5)))


def test_a_queued_producer_is_not_an_answer_yet():
    session = connected(Role.CLIENT)
    session.send(producer(1, 10))
    assert receive(session, encode_command(producer_success(10, ready=False))) == []
    assert session.producer_state(1) is HandleState.CREATING
    [event] = receive(session, encode_command(producer_success(10)))
    assert event.request_id == 10 and session.producer_state(1) is HandleState.READY


def test_a_server_tracks_no_answers_for_what_it_answers_untracked():
    session = connected(Role.SERVER)
    assert receive(session, encode_command(lookup(5)))[0].command.type == T.LOOKUP
    assert session.outstanding() == set()
    session.send(lookup_response(5))
    session.send(error(77))  # e.g. an ERROR to a malformed command: nothing to match, nothing raised


# ---- producers and consumers: every row of HANDLE_TRANSITIONS, from both ends ------------------------------

HANDLE_ROWS = [
    # steps (client's view: send = client to broker), handle kind, id, final state, transitions they cover
    ([("send", producer())], "producer", 1, HandleState.CREATING, [("CLOSED", "open")]),
    ([("send", producer()), ("recv", producer_success())], "producer", 1, HandleState.READY,
     [("CLOSED", "open"), ("CREATING", "created")]),
    ([("send", producer()), ("recv", error(10))], "producer", 1, HandleState.CLOSED,
     [("CLOSED", "open"), ("CREATING", "failed")]),
    ([("send", producer()), ("send", close_producer(1, 30))], "producer", 1, HandleState.CLOSED,
     [("CLOSED", "open"), ("CREATING", "close")]),
    ([("send", producer()), ("send", close_producer(1, 30)), ("recv", producer_success())], "producer", 1,
     HandleState.CLOSED, [("CLOSED", "open"), ("CREATING", "close"), ("CLOSED", "created")]),
    ([("send", producer()), ("send", close_producer(1, 30)), ("recv", error(10))], "producer", 1,
     HandleState.CLOSED, [("CLOSED", "open"), ("CREATING", "close"), ("CLOSED", "failed")]),
    ([("send", producer()), ("recv", producer_success()), ("send", close_producer(1, 30))], "producer", 1,
     HandleState.CLOSED, [("CLOSED", "open"), ("CREATING", "created"), ("READY", "close")]),
    ([("send", producer()), ("recv", producer_success()), ("recv", close_producer(1))], "producer", 1,
     HandleState.CLOSED, [("CLOSED", "open"), ("CREATING", "created"), ("READY", "close")]),
    ([("send", close_producer(4, 30))], "producer", 4, HandleState.CLOSED, [("CLOSED", "close")]),
    ([("send", producer()), ("recv", producer_success()), ("send", producer(1, 20)), ("recv", producer_success(20))],
     "producer", 1, HandleState.READY,
     [("CLOSED", "open"), ("CREATING", "created"), ("READY", "open"), ("READY", "created")]),
    ([("send", producer()), ("recv", producer_success()), ("send", producer(1, 20)), ("recv", error(20))],
     "producer", 1, HandleState.READY,
     [("CLOSED", "open"), ("CREATING", "created"), ("READY", "open"), ("READY", "failed")]),
    ([("send", subscribe()), ("recv", success(11))], "consumer", 2, HandleState.READY,
     [("CLOSED", "open"), ("CREATING", "created")]),
    ([("send", subscribe()), ("send", subscribe(2, 20)), ("recv", success(20)), ("recv", success(11))], "consumer", 2,
     HandleState.READY, [("CLOSED", "open"), ("CREATING", "open"), ("CREATING", "created"), ("READY", "created")]),
    ([("send", subscribe()), ("recv", error(11))], "consumer", 2, HandleState.CLOSED,
     [("CLOSED", "open"), ("CREATING", "failed")]),
    ([("send", subscribe()), ("recv", success(11)), ("recv", close_consumer())], "consumer", 2, HandleState.CLOSED,
     [("CLOSED", "open"), ("CREATING", "created"), ("READY", "close")]),
    ([("send", subscribe()), ("recv", success(11)), ("send", close_consumer(2, 31))], "consumer", 2,
     HandleState.CLOSED, [("CLOSED", "open"), ("CREATING", "created"), ("READY", "close")]),
    ([("send", subscribe()), ("recv", success(11)), ("send", unsubscribe()), ("recv", success(12))], "consumer", 2,
     HandleState.CLOSED, [("CLOSED", "open"), ("CREATING", "created"), ("READY", "close")]),
    ([("send", subscribe()), ("recv", success(11)), ("send", unsubscribe()), ("recv", error(12))], "consumer", 2,
     HandleState.READY, [("CLOSED", "open"), ("CREATING", "created")]),
]

_MIRROR = {"send": "recv", "recv": "send"}


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
@pytest.mark.parametrize("steps,kind,handle_id,state,_", HANDLE_ROWS)
def test_handle_lifecycle(role, steps, kind, handle_id, state, _):
    session = connected(role)
    if role is Role.SERVER:
        steps = [(_MIRROR[d], cmd) for d, cmd in steps]
    run(session, steps)
    assert getattr(session, f"{kind}_state")(handle_id) is state


def test_every_handle_transition_is_exercised():
    covered = {kind: {(getattr(HandleState, s), e) for _, k, _, _, rows in HANDLE_ROWS if k == kind for s, e in rows}
               for kind in ("producer", "consumer")}
    assert covered["producer"] == set(HANDLE_TRANSITIONS)
    assert covered["producer"] | covered["consumer"] == set(CONSUMER_TRANSITIONS)
    assert (HandleState.CREATING, "open") not in HANDLE_TRANSITIONS  # a producer's: the violation rows above


def test_an_abandoned_create_gives_the_handle_up():
    session = connected(Role.CLIENT)
    session.send(producer(1, 10))
    session.abandon(10)
    assert session.producer_state(1) is HandleState.CLOSED
    session.send(producer(1, 11))  # the client may create it again
    assert session.producer_state(1) is HandleState.CREATING


# ---- keep-alive on an injected clock -------------------------------------------------------------------------

# role, connected?, protocol version, [(seconds the clock moves on, bytes arrive then?, what keep_alive() says)]
KEEP_ALIVE_ROWS = [
    (Role.CLIENT, True, 20, [(10, False, KeepAlive.NOTHING), (20, False, KeepAlive.PING), (29, False, KeepAlive.PING),
                             (1, False, KeepAlive.DEAD)]),
    (Role.CLIENT, True, 20, [(45, False, KeepAlive.PING), (10, True, KeepAlive.NOTHING), (30, False, KeepAlive.PING)]),
    (Role.SERVER, True, 20, [(30, False, KeepAlive.PING), (30, False, KeepAlive.DEAD)]),
    (Role.SERVER, True, 20, [(30, False, KeepAlive.PING), (30, True, KeepAlive.PING), (30, True, KeepAlive.PING)]),
    (Role.SERVER, True, 20, [(10, False, KeepAlive.PING), (10, False, KeepAlive.PING), (10, False, KeepAlive.DEAD)]),
    (Role.SERVER, True, 0, [(30, False, KeepAlive.NOTHING), (30, False, KeepAlive.NOTHING)]),
    (Role.SERVER, False, 20, [(30, False, KeepAlive.NOTHING), (300, False, KeepAlive.NOTHING)]),
]


@pytest.mark.parametrize("role,is_connected,version,ticks", KEEP_ALIVE_ROWS)
def test_keep_alive(role, is_connected, version, ticks):
    clock = Clock()
    session = PulsarSession(role, keep_alive_s=30, clock=clock)
    if is_connected:
        receive(session, encode_command(command(T.CONNECT, connect=pb.CommandConnect(
            client_version="t", protocol_version=version))) if role is Role.SERVER else encode_command(CONNECTED))
        if role is Role.SERVER:
            session.send(command(T.CONNECTED, connected=pb.CommandConnected(server_version="s", protocol_version=version)))
    for step, heard, expected in ticks:
        clock.now += step
        if heard:
            receive(session, encode_command(PING))
        assert session.keep_alive() is expected, (step, heard)


def test_a_closed_session_does_not_ping():
    clock = Clock()
    session = connected(Role.SERVER, clock)
    session.close()
    clock.now += 100
    assert session.keep_alive() is KeepAlive.NOTHING


def test_a_queued_producer_is_ready_on_the_brokers_side():
    """WaitForExclusive: the broker has bound the producer when it says "queued"; a retried create is answered
    from that binding, and the final answer still matches the first request."""
    session = connected(Role.SERVER)
    receive(session, encode_command(producer(1, 10)))
    session.send(producer_success(10, ready=False))
    assert session.producer_state(1) is HandleState.READY and session.outstanding() == {10}
    receive(session, encode_command(producer(1, 20)))
    session.send(producer_success(20))
    session.send(producer_success(10))
    assert session.producer_state(1) is HandleState.READY and session.outstanding() == set()


def test_a_create_knows_whether_it_still_counts():
    session = connected(Role.SERVER)
    receive(session, encode_command(producer(1, 10)))
    assert session.opened_by("producers", 1) == 10
    receive(session, encode_command(close_producer(1, 11)))
    assert session.opened_by("producers", 1) is None
    receive(session, encode_command(producer(1, 12)))
    assert session.opened_by("producers", 1) == 12  # the first create, finishing now, must give way


def test_a_violation_names_the_frame_that_did_it():
    session = connected(Role.SERVER)
    receive(session, encode_command(producer(1, 10)))
    session.receive_data(encode_command(producer(1, 20)))
    with pytest.raises(IllegalTransition) as info:
        session.next_event()
    assert info.value.frame.command.producer.request_id == 20
    assert session.outstanding() == {10}


def test_abandoning_an_old_create_leaves_a_newer_one_alone():
    session = connected(Role.SERVER)
    receive(session, encode_command(producer(1, 10)))
    receive(session, encode_command(close_producer(1, 11)))
    receive(session, encode_command(producer(1, 12)))
    session.abandon(10)
    assert session.producer_state(1) is HandleState.CREATING and session.outstanding() == {12}
    session.abandon(12)
    assert session.producer_state(1) is HandleState.CLOSED and session.outstanding() == set()


def test_a_client_bounds_its_outstanding_requests(monkeypatch):
    monkeypatch.setattr("magnetar.protocol.session.MAX_OUTSTANDING_REQUESTS", 2)
    session = connected(Role.CLIENT)
    session.send(lookup(1))
    session.send(lookup(2))
    with pytest.raises(IllegalTransition):
        session.send(producer(1, 3))
    assert session.outstanding() == {1, 2} and session.producer_state(1) is HandleState.CLOSED
