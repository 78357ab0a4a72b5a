"""Clusters as Pulsar keeps them: ``/admin/clusters/<name>`` holds the cluster's ClusterData JSON.

Setup scripts written for Pulsar create the cluster before anything else (``PUT /admin/v2/clusters/<name>`` with
its service URLs), and tenants name their allowed clusters. A broker creates its own cluster's entry when it
starts, with its own URLs, unless one exists (an operator's entry is never overwritten). The document keeps
Pulsar's field names; besides the four URLs, the other ClusterData fields Pulsar accepts are stored as given so
admin tools read back what they wrote. Writes of an existing entry are conditional on its version.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field

from broker.errors import BrokerError, NotAllowedError, metadata_errors
from broker.ownership.resources import ConflictError, NotFoundError
from broker.topics.names import check_segment
from storage.errors import BadVersionError, NodeExistsError, NoNodeError
from storage.metadata import MetadataStore

CLUSTERS_ROOT = "/admin/clusters"
MAX_VALUE_CHARS = 4096
MAX_LIST_ITEMS = 256
MAX_CLUSTERS = 1024  # a bound on what the admin REST can make the metadata store hold

URL_SCHEMES = {  # ClusterData URL field -> the schemes Pulsar accepts in it
    "serviceUrl": ("http",),
    "serviceUrlTls": ("https",),
    "brokerServiceUrl": ("pulsar",),
    "brokerServiceUrlTls": ("pulsar+ssl",),
    "proxyServiceUrl": ("pulsar", "pulsar+ssl", "http", "https"),
}
# The rest of Pulsar's ClusterData, stored as given (type checked) so admin tools read back what they wrote.
TEXT_FIELDS = frozenset({
    "authenticationPlugin", "authenticationParameters", "proxyProtocol", "listenerName",
    "brokerClientTlsTrustStoreType", "brokerClientTlsTrustStore", "brokerClientTlsTrustStorePassword",
    "brokerClientTlsKeyStoreType", "brokerClientTlsKeyStore", "brokerClientTlsKeyStorePassword",
    "brokerClientTrustCertsFilePath", "brokerClientKeyFilePath", "brokerClientCertificateFilePath",
    "brokerClientSslFactoryPlugin", "brokerClientSslFactoryPluginParams",
})
BOOL_FIELDS = frozenset({"brokerClientTlsEnabled", "tlsAllowInsecureConnection", "brokerClientTlsEnabledWithKeyStore"})
LIST_FIELDS = frozenset({"peerClusterNames", "brokerClientTlsCiphers", "brokerClientTlsProtocols"})


class ClusterDataError(BrokerError):
    """The ClusterData body is malformed (HTTP 400)."""

    http_status = 400


@dataclass(frozen=True)
class ClusterData:
    service_url: str | None = None
    service_url_tls: str | None = None
    broker_service_url: str | None = None
    broker_service_url_tls: str | None = None
    extra: dict = field(default_factory=dict)  # the other ClusterData fields, by Pulsar name

    def to_json(self) -> dict:
        doc = {"serviceUrl": self.service_url, "serviceUrlTls": self.service_url_tls,
               "brokerServiceUrl": self.broker_service_url, "brokerServiceUrlTls": self.broker_service_url_tls}
        return {**self.extra, **{k: v for k, v in doc.items() if v}}

    @classmethod
    def from_json(cls, doc: object) -> "ClusterData":
        """Parse and check a ClusterData body. Raises ClusterDataError naming the field."""
        if not isinstance(doc, dict):
            raise ClusterDataError("cluster data must be a JSON object")
        unknown = sorted(set(doc) - set(URL_SCHEMES) - TEXT_FIELDS - BOOL_FIELDS - LIST_FIELDS)
        if unknown:
            raise ClusterDataError(f"unknown ClusterData fields: {', '.join(k[:64] for k in unknown[:10])}")
        extra = {}
        for key, value in doc.items():
            if value is None or value == "":
                continue
            if key in URL_SCHEMES:
                _check_url(key, value)
                if key == "proxyServiceUrl":
                    extra[key] = value
            elif key in BOOL_FIELDS:
                if not isinstance(value, bool):
                    raise ClusterDataError(f"{key} must be true or false")
                extra[key] = value
            elif key in LIST_FIELDS:
                if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS \
                        or not all(isinstance(v, str) and len(v) <= MAX_VALUE_CHARS for v in value):
                    raise ClusterDataError(f"{key} must be a list of at most {MAX_LIST_ITEMS} strings")
                extra[key] = value
            else:
                if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
                    raise ClusterDataError(f"{key} must be a string of at most {MAX_VALUE_CHARS} characters")
                extra[key] = value
        return cls(doc.get("serviceUrl") or None, doc.get("serviceUrlTls") or None, doc.get("brokerServiceUrl") or None,
                   doc.get("brokerServiceUrlTls") or None, extra)


def _check_url(key: str, value: object) -> None:
    if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
        raise ClusterDataError(f"{key} must be a URL string")
    # Pulsar accepts a comma-separated host list in one URL (pulsar://h1:6650,h2:6650); check each host part.
    parts = urllib.parse.urlsplit(value)
    if parts.scheme.lower() not in URL_SCHEMES[key] or not parts.netloc:
        want = " or ".join(f"{s}://host:port" for s in URL_SCHEMES[key])
        raise ClusterDataError(f"{key} {value[:200]!r} is not a valid URL: want {want}")


class Clusters:
    """Reads and conditional writes of ``/admin/clusters/<name>``. Raises NotFoundError (404), ConflictError
    (409), InvalidTopicNameError for a bad name (412) and BrokerMetadataError."""

    def __init__(self, store: MetadataStore):
        self.store = store

    @staticmethod
    def _path(name: str) -> str:
        return f"{CLUSTERS_ROOT}/{check_segment('cluster', name)}"

    async def names(self) -> list[str]:
        with metadata_errors("listing the clusters"):
            try:
                return sorted(await self.store.children(CLUSTERS_ROOT))
            except NoNodeError:
                return []

    async def get(self, name: str) -> ClusterData:
        return (await self._read(name))[0]

    async def _read(self, name: str) -> tuple[ClusterData, int]:
        with metadata_errors(f"reading cluster {name}"):
            try:
                data, stat = await self.store.get(self._path(name))
            except NoNodeError:
                raise NotFoundError(f"cluster {name} does not exist") from None
        return ClusterData.from_json(json.loads(data)), stat.version

    async def create(self, name: str, data: ClusterData) -> None:
        if len(await self.names()) >= MAX_CLUSTERS:
            raise NotAllowedError(f"there are {MAX_CLUSTERS} clusters already; delete one first")
        with metadata_errors(f"creating cluster {name}"):
            try:
                await self.store.create(self._path(name), _dump(data), make_parents=True)
            except NodeExistsError:
                raise ConflictError(f"cluster {name} already exists") from None

    async def update(self, name: str, data: ClusterData) -> None:
        """Replace the cluster's data, conditional on the version read (a concurrent change raises ConflictError)."""
        _, version = await self._read(name)
        with metadata_errors(f"updating cluster {name}"):
            try:
                await self.store.set(self._path(name), _dump(data), version)
            except NoNodeError:
                raise NotFoundError(f"cluster {name} does not exist") from None
            except BadVersionError:
                raise ConflictError(f"cluster {name} changed concurrently; retry") from None

    async def delete(self, name: str) -> None:
        with metadata_errors(f"deleting cluster {name}"):
            try:
                await self.store.delete(self._path(name))
            except NoNodeError:
                raise NotFoundError(f"cluster {name} does not exist") from None

    async def ensure(self, name: str, data: ClusterData) -> None:
        """Create the entry unless it exists (a broker registering its own cluster at start)."""
        try:
            await self.create(name, data)
        except ConflictError:
            pass


def _dump(data: ClusterData) -> bytes:
    return json.dumps(data.to_json(), sort_keys=True).encode()
