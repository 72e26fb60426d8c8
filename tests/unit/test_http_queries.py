"""The HTTP query service (``streamtable.state.http``) over real read-only stores, without a
broker: each store's replica is filled directly, as its consumer thread would fill it.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from dataclasses import dataclass, field

import httpx
import pytest
from fastapi.testclient import TestClient

from streamtable import Serdes, StreamsBuilder
from streamtable.compiler.changelog import ChangelogInfo
from streamtable.config import StreamsConfig
from streamtable.errors import ConfigError, InvalidStateStoreException, StreamsError
from streamtable.state.http import QueryServer, create_app
from streamtable.state.queries import ReadOnlyKeyValueStore
from streamtable.state.replica import StoreReplica

pytestmark = pytest.mark.unit

S, L, INT, B = Serdes.string(), Serdes.long(), Serdes.integer(), Serdes.bytes()


@dataclass(frozen=True)
class Point:
    x: int
    y: int


POINT = Serdes.custom(
    lambda p: f"{p.x},{p.y}".encode(),
    lambda b: Point(*map(int, b.decode().split(","))),
    name="Point",
)

#: store -> (key serde, value serde, {key: value}); all written by query "q" except "tables"
STORES = {
    "counts": (S, L, {"alice": 3, "bob": 7, "carol": 1, "dave": 9, "dan": 2}),
    "by-id": (L, S, {1: "one", 42: "forty-two", -5: "minus five"}),
    "small": (INT, S, {7: "seven"}),
    "raw": (B, B, {b"\x00k": b"\x00\xff"}),
    "docs": (S, Serdes.json(), {"d1": {"n": 1, "xs": [1.5, None], "ok": True}}),
    "points": (S, POINT, {"p": Point(1, 2)}),
}


@dataclass
class FakeStreams:
    """What the HTTP service needs of ``KafkaStreams``: config, state, store(), stores."""

    replica: StoreReplica
    infos: dict[str, ChangelogInfo]
    config: StreamsConfig = field(
        default_factory=lambda: StreamsConfig.from_mapping(
            {
                "application.id": "clicks-app",
                "bootstrap.servers": "unused:9092",
                "application.server": "127.0.0.1:8080",
            }
        )
    )
    state: str = "RUNNING"

    def store(self, parameters):
        if self.state != "RUNNING":
            raise InvalidStateStoreException(
                f"Cannot query store {parameters.store_name!r}: the application is "
                f"{self.state}, not RUNNING."
            )
        return ReadOnlyKeyValueStore(self.infos[parameters.store_name], self.replica)

    def queryable_stores(self):
        return {name: info.kind for name, info in sorted(self.infos.items())}


def make_streams() -> FakeStreams:
    infos = {
        name: ChangelogInfo(name, f"clicks-app-{name}-changelog", 2, "key_value", ks, vs, "q")
        for name, (ks, vs, _) in STORES.items()
    }
    replica = StoreReplica("unused:9092", infos)
    for name, (ks, vs, data) in STORES.items():
        for k, v in data.items():
            replica._state.stores[name][ks.serialize(k)] = vs.serialize(v)
    replica._state.positions["q"] = {("clicks", 0): 41, ("clicks", 1): 7}
    replica._state.restoring.clear()  # read to the end, as its consumer thread marks it
    return FakeStreams(replica, infos)


@pytest.fixture
def streams():
    return make_streams()


@pytest.fixture
def client(streams):
    return TestClient(create_app(streams))


def set_position(streams, offsets):
    with streams.replica._cond:
        streams.replica._state.positions["q"] = offsets
        streams.replica._cond.notify_all()


POSITION = {"clicks": {"0": 41, "1": 7}}


# -- answers ----------------------------------------------------------------------------------


def test_stores_lists_each_store_with_serdes_entries_and_position(client):
    r = client.get("/stores")
    assert r.status_code == 200
    stores = {s["name"]: s for s in r.json()["stores"]}
    assert list(stores) == sorted(STORES)
    assert stores["counts"] == {
        "name": "counts",
        "kind": "key_value",
        "key_serde": "String",
        "value_serde": "Long",
        "approximate_num_entries": 5,
        "position": POSITION,
    }
    assert stores["by-id"]["key_serde"] == "Long"


def test_get_a_key_gives_value_and_position(client):
    r = client.get("/stores/counts/keys/bob")
    assert r.status_code == 200
    assert r.json() == {"store": "counts", "key": "bob", "value": 7, "position": POSITION}
    assert client.get("/stores/by-id/keys/-5").json()["value"] == "minus five"
    assert client.get("/stores/by-id/keys/42").json()["key"] == 42


def test_an_absent_key_is_404_with_a_message_and_the_position(client):
    r = client.get("/stores/counts/keys/zoe")
    assert r.status_code == 404
    assert r.json() == {"error": "Store 'counts' has no value for key 'zoe'.", "position": POSITION}


def test_range_in_key_order_reverse_limit_and_open_ends(client):
    def keys(url):
        r = client.get(url)
        assert r.status_code == 200, r.text
        return [e["key"] for e in r.json()["entries"]]

    assert keys("/stores/counts/range?from=b&to=d") == ["bob", "carol"]
    assert keys("/stores/counts/range?from=bob&to=dan") == ["bob", "carol", "dan"]
    assert keys("/stores/counts/range?from=b&to=dz&reverse=true") == ["dave", "dan", "carol", "bob"]
    assert keys("/stores/counts/range?to=bob") == ["alice", "bob"]
    assert keys("/stores/counts/range?from=d&to=") == ["dan", "dave"]
    r = client.get("/stores/counts/range?limit=2")
    assert r.json()["entries"] == [{"key": "alice", "value": 3}, {"key": "bob", "value": 7}]
    assert r.json()["more"] is True
    # Long keys in serialized-byte order: negative keys after positive ones, as in Kafka
    assert keys("/stores/by-id/all") == [1, 42, -5]
    assert keys("/stores/by-id/range?from=1&to=42") == [1, 42]


def test_an_inverted_range_returns_no_entries_as_kafka_streams(client):
    r = client.get("/stores/counts/range?from=dave&to=alice")
    assert r.status_code == 200
    assert r.json()["entries"] == [] and r.json()["more"] is False


def test_prefix_scan_and_all(client):
    r = client.get("/stores/counts/prefix/da")
    assert [e["key"] for e in r.json()["entries"]] == ["dan", "dave"]
    r = client.get("/stores/counts/all?reverse=true&limit=1")
    assert r.json()["entries"] == [{"key": "dave", "value": 9}] and r.json()["more"]


def test_values_render_as_json_bytes_as_base64_other_objects_as_repr(client):
    assert client.get("/stores/raw/all").json()["entries"] == [{"key": "AGs=", "value": "AP8="}]
    assert client.get("/stores/docs/keys/d1").json()["value"] == {
        "n": 1,
        "xs": [1.5, None],
        "ok": True,
    }
    assert client.get("/stores/points/keys/p").json()["value"] == "Point(x=1, y=2)"


# -- bad queries: 4xx with a message ----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "status", "match"),
    [
        ("/stores/nope/keys/a", 404, r"No queryable store 'nope'; the queryable stores are \["),
        ("/stores/nope/all", 404, "No queryable store 'nope'"),
        ("/stores/by-id/keys/x1", 400, "Store 'by-id' has Long keys: key 'x1' is not an integer"),
        ("/stores/by-id/range?from=1&to=z", 400, "to 'z' is not an integer"),
        ("/stores/small/keys/99999999999", 400, "not a valid Integer key"),
        ("/stores/raw/keys/abc", 400, r"Keys of store 'raw' \(ByteArray serde\) cannot be given"),
        ("/stores/by-id/prefix/4", 400, "prefix scans over HTTP need a store with String keys"),
        ("/stores/counts/all?limit=0", 400, "Invalid request parameter: limit"),
        ("/stores/counts/range?reverse=maybe", 400, "Invalid request parameter: reverse"),
        ("/stores/counts/keys/a?timeout_ms=-1", 400, "Invalid request parameter: timeout_ms"),
        ("/stores/counts/keys/a?min_position=clicks:0", 400, "topic:partition:offset"),
        ("/nowhere", 404, r"No such endpoint: GET /nowhere \(see /docs\)"),
    ],
)
def test_bad_queries_are_4xx_with_a_json_message(client, url, status, match):
    r = client.get(url)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert re.search(match, r.json()["error"]), r.json()["error"]


def test_other_methods_are_405_with_a_json_message(client):
    r = client.post("/stores")
    assert r.status_code == 405
    assert r.json() == {"error": "POST is not allowed on /stores; use GET."}


def test_a_stopped_application_or_a_failed_replica_is_503_without_a_trace(streams, client):
    streams.replica._error = RuntimeError("changelog topic deleted")
    r = client.get("/stores/counts/keys/bob")
    assert r.status_code == 503
    assert "replica stopped reading the changelog topics: changelog topic deleted" in r.text
    assert "Traceback" not in r.text
    streams.replica._error = None
    streams.state = "ERROR"
    r = client.get("/stores")
    assert r.status_code == 503
    assert r.json()["error"].endswith("the application is ERROR, not RUNNING.")


def test_an_unexpected_error_is_a_json_500_without_a_trace(streams, client, monkeypatch):
    def broken(parameters):
        raise RuntimeError("boom")

    monkeypatch.setattr(streams, "store", broken)
    r = client.get("/stores/counts/keys/bob")
    assert r.status_code == 500
    assert r.json() == {"error": "Internal error: RuntimeError: boom"}


# -- positions --------------------------------------------------------------------------------


def test_min_position_reached_answers_at_once(client):
    r = client.get("/stores/counts/keys/bob?min_position=clicks:0:41,clicks:1:5")
    assert r.status_code == 200 and r.json()["value"] == 7


def test_min_position_not_reached_in_time_is_504_with_the_position_reached(client):
    r = client.get("/stores/counts/keys/bob?min_position=clicks:0:100&timeout_ms=0")
    assert r.status_code == 504
    assert "did not reach position {clicks-0: 100}" in r.json()["error"]
    assert r.json()["position"] == POSITION


def test_min_position_waits_until_the_store_gets_there(streams, client):
    later = threading.Timer(0.05, set_position, (streams, {("clicks", 0): 100}))
    later.start()
    try:
        r = client.get("/stores/counts/all?min_position=clicks:0:100&timeout_ms=30000")
    finally:
        later.join()
    assert r.status_code == 200, r.text
    assert r.json()["position"] == {"clicks": {"0": 100}}


# -- metadata and OpenAPI ---------------------------------------------------------------------


def test_metadata_names_address_application_stores_and_covered_partitions(client):
    r = client.get("/metadata")
    assert r.status_code == 200
    meta = r.json()
    assert meta["application_id"] == "clicks-app"
    assert meta["application_server"] == "127.0.0.1:8080"
    assert meta["state"] == "RUNNING"
    parts = [{"topic": "clicks", "partition": 0}, {"topic": "clicks", "partition": 1}]
    assert meta["stores"][0] == {"name": "by-id", "kind": "key_value", "source_partitions": parts}
    assert [s["name"] for s in meta["stores"]] == sorted(STORES)
    assert meta["topic_partitions"] == parts


def test_metadata_answers_when_not_running(streams, client):
    streams.state = "ERROR"
    meta = client.get("/metadata").json()
    assert meta["state"] == "ERROR"
    assert all(s["source_partitions"] == [] for s in meta["stores"])


def test_openapi_lists_the_endpoints(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/stores",
        "/stores/{name}/keys/{key}",
        "/stores/{name}/range",
        "/stores/{name}/all",
        "/stores/{name}/prefix/{prefix}",
        "/metadata",
    } <= set(paths)
    assert client.get("/docs").status_code == 200


# -- the bearer token -------------------------------------------------------------------------


def test_with_a_token_every_request_needs_it(streams):
    client = TestClient(create_app(streams, token="s3cret"))
    r = client.get("/stores/counts/keys/bob")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "requires a bearer token" in r.json()["error"]
    r = client.get("/stores", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"].startswith("Invalid credentials")
    assert client.get("/docs").status_code == 401
    assert client.get("/nowhere").status_code == 401
    ok = {"Authorization": "Bearer s3cret"}
    assert client.get("/stores/counts/keys/bob", headers=ok).json()["value"] == 7
    assert client.get("/docs", headers=ok).status_code == 200


# -- configuration ----------------------------------------------------------------------------


def topology():
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=S).to("out", key_serde=S, value_serde=S)
    return b.build()


BASE = {"application.id": "a", "bootstrap.servers": "localhost:9092"}


@pytest.mark.parametrize("address", ["0.0.0.0:8080", "10.1.2.3:80", "example.com:8080"])
def test_a_non_loopback_address_without_a_token_is_refused(address):
    from streamtable import KafkaStreams

    with pytest.raises(ConfigError) as e:
        KafkaStreams(topology(), {**BASE, "application.server": address})
    msg = str(e.value)
    assert f"Config 'application.server' is {address!r}" in msg
    assert "Set 'streamtable.query.token'" in msg
    assert "or bind a loopback address such as '127.0.0.1:" in msg


@pytest.mark.parametrize("address", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080"])
def test_loopback_needs_no_token_and_other_addresses_take_one(address):
    from streamtable import KafkaStreams

    app = KafkaStreams(topology(), {**BASE, "application.server": address})
    assert app.config.application_server == address
    assert app.queryable_stores() == {}  # before start()
    app = KafkaStreams(
        topology(),
        {**BASE, "application.server": "0.0.0.0:8080", "streamtable.query.token": "t"},
    )
    assert app.config.query_token == "t"


@pytest.mark.parametrize(
    ("address", "match"),
    [
        ("8080", "expected 'host:port'"),
        ("host:0", "port in 1-65535"),
        ("host:http", "expected 'host:port'"),
        ("::1:8080", r"IPv6 host in brackets \('\[::1\]:8080'\)"),
        ("a b:80", "invalid host"),
    ],
)
def test_application_server_must_be_host_port(address, match):
    with pytest.raises(ConfigError, match="Config 'application.server' expects 'host:port'.*"):
        StreamsConfig.from_mapping({**BASE, "application.server": address})
    with pytest.raises(ConfigError, match=match):
        StreamsConfig.from_mapping({**BASE, "application.server": address})


def test_the_token_is_not_shown_by_repr():
    c = StreamsConfig.from_mapping({**BASE, "streamtable.query.token": "s3cret"})
    assert "s3cret" not in repr(c)
    assert c.to_mapping()["streamtable.query.token"] == "s3cret"


# -- the server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_query_server_serves_on_its_address_until_stopped(streams):
    address = f"127.0.0.1:{free_port()}"
    server = QueryServer(streams, address, token="t")
    server.bind()
    busy = QueryServer(streams, address)
    with pytest.raises(
        StreamsError, match=f"Cannot serve interactive queries on application.server='{address}'"
    ):
        busy.bind()
    server.start()
    try:
        r = httpx.get(
            f"http://{address}/stores/counts/keys/bob", headers={"Authorization": "Bearer t"}
        )
        assert r.status_code == 200 and json.loads(r.text)["value"] == 7
    finally:
        server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{address}/stores")


def test_the_listening_socket_is_tcp_so_answers_are_not_delayed_by_nagle(streams):
    """asyncio sets TCP_NODELAY only on accepted sockets whose protocol is IPPROTO_TCP; with
    proto 0 every answer waited ~40 ms for a delayed ACK (measured: 23 answers/s instead of
    ~1,000). The accepted connections inherit the listening socket's protocol.
    """
    server = QueryServer(streams, f"127.0.0.1:{free_port()}")
    server.bind()
    try:
        listening = server._socket
        assert listening.proto == socket.IPPROTO_TCP
        listening.listen()
        with socket.create_connection(listening.getsockname()[:2]):
            conn, _ = listening.accept()
            with conn:
                assert conn.proto == socket.IPPROTO_TCP
    finally:
        server.stop()
