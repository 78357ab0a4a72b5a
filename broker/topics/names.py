"""The broker's boundary to the topic-name parser (magnetar.topic_name): the same rules, the broker's error.

The parser lives in the client package, which the broker already depends on
for the wire codec, so broker, client and Spark connector read names one way.
It raises ValueError; these wrappers raise InvalidTopicNameError with the
same message, which a client receives as ServerError.InvalidTopicName (or
HTTP 412 from the admin REST). Broker code parses names only through them;
the name types themselves (TopicName, NamespaceName) come from
magnetar.topic_name.
"""

from __future__ import annotations

from broker.errors import InvalidTopicNameError
from magnetar import topic_name
from magnetar.topic_name import NamespaceName, TopicName


def parse_topic(text: str) -> TopicName:
    """Parse and validate a topic name; short forms expand to public/default. Raises InvalidTopicNameError."""
    try:
        return topic_name.parse_topic(text)
    except ValueError as exc:
        raise InvalidTopicNameError(str(exc)) from None


def parse_namespace(text: str) -> NamespaceName:
    """``<tenant>/<namespace>``. Raises InvalidTopicNameError."""
    try:
        return NamespaceName.parse(text)
    except ValueError as exc:
        raise InvalidTopicNameError(str(exc)) from None


def check_segment(kind: str, value: str) -> str:
    """A tenant, namespace or cluster name: letters, digits and ``-=:._``. Raises InvalidTopicNameError."""
    try:
        return topic_name.check_segment(kind, value)
    except ValueError as exc:
        raise InvalidTopicNameError(str(exc)) from None
