"""Transport: real POSTs to aiohttp servers on 127.0.0.1, through the SSRF-vetted resolver."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer

from a2a_push.delivery.ssrf import AddressPolicy
from a2a_push.delivery.transport import (
    MAX_RESPONSE_BODY_BYTES,
    AddressRefused,
    ConnectError,
    HTTPResult,
    RequestTimeout,
    Timeouts,
    Transport,
    TransportError,
    describe,
)
from a2a_push.errors import A2APushError, InvalidConfigError
from a2a_push.protocol.constants import A2A_MEDIA_TYPE, HEADER_AUTHORIZATION

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]

SECRET = "Bearer s3cr3t-token-value"
BODY = b'{"statusUpdate":{"taskId":"t-1","status":{"state":"TASK_STATE_COMPLETED"}}}'
HEADERS = {
    "Content-Type": A2A_MEDIA_TYPE,
    HEADER_AUTHORIZATION: SECRET,
    "webhook-id": "msg_1",
}


class Sink:
    """What a test server received."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.peers: list[object] = []

    async def record(self, request: web.Request) -> None:
        body = await request.read()
        self.requests.append((request.path, dict(request.headers), body))
        if request.transport is not None:
            self.peers.append(request.transport.get_extra_info("peername"))


class FixedResolver(AbstractResolver):
    """A DNS test double returning fixed addresses for a host name."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in self.answers.get(host, [])
        ]

    async def close(self) -> None:
        pass


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def release() -> asyncio.Event:
    # Lets slow handlers finish when the test ends, so the server shuts down promptly.
    return asyncio.Event()


@pytest.fixture
async def server(
    aiohttp_server: ServerFactory, sink: Sink, release: asyncio.Event
) -> AsyncIterator[TestServer]:
    async def hook(request: web.Request) -> web.Response:
        await sink.record(request)
        return web.Response(status=202, body=b"accepted", headers={"X-Receiver": "ok"})

    async def no_content_type(request: web.Request) -> web.Response:
        await sink.record(request)
        return web.Response(status=204)

    async def redirect(request: web.Request) -> web.Response:
        await sink.record(request)
        return web.Response(status=307, headers={"Location": "/target"})

    async def target(request: web.Request) -> web.Response:
        await sink.record(request)
        return web.Response(status=200)

    async def slow(request: web.Request) -> web.Response:
        await sink.record(request)
        await asyncio.wait_for(release.wait(), timeout=10)
        return web.Response(status=200)

    async def large(request: web.Request) -> web.Response:
        await sink.record(request)
        return web.Response(status=500, body=bytes(range(256)) * 400)  # 100 KiB

    async def stalled_body(request: web.Request) -> web.StreamResponse:
        await sink.record(request)
        response = web.StreamResponse(status=200)
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b"partial")
        await asyncio.wait_for(release.wait(), timeout=10)
        return response

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/plain", no_content_type)
    app.router.add_post("/redirect", redirect)
    app.router.add_route("*", "/target", target)
    app.router.add_post("/slow", slow)
    app.router.add_post("/large", large)
    app.router.add_post("/stalled-body", stalled_body)
    test_server = await aiohttp_server(app)
    yield test_server
    release.set()


def url_of(server: TestServer, path: str) -> str:
    return str(server.make_url(path))


@pytest.fixture
async def loopback_transport() -> AsyncIterator[Transport]:
    async with Transport(AddressPolicy(allow_loopback=True)) as transport:
        yield transport


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- successful requests ---------------------------------------------------------------


async def test_post_returns_status_headers_body_and_elapsed(
    loopback_transport: Transport, server: TestServer
) -> None:
    result = await loopback_transport.post(url_of(server, "/hook"), BODY, HEADERS)
    assert isinstance(result, HTTPResult)
    assert result.status == 202
    assert result.body == b"accepted"
    assert result.headers["X-Receiver"] == "ok"
    assert result.headers["x-receiver"] == "ok"  # case-insensitive
    assert 0 < result.elapsed < 5


async def test_server_receives_exact_body_and_headers(
    loopback_transport: Transport, server: TestServer, sink: Sink
) -> None:
    await loopback_transport.post(url_of(server, "/hook"), BODY, HEADERS)
    [(path, headers, body)] = sink.requests
    assert path == "/hook"
    assert body == BODY
    assert headers["Content-Type"] == A2A_MEDIA_TYPE
    assert headers["Authorization"] == SECRET
    assert headers["webhook-id"] == "msg_1"
    assert headers["User-Agent"] == "a2a-push/0.1"
    assert headers["Content-Length"] == str(len(BODY))


async def test_no_default_content_type_is_added(
    loopback_transport: Transport, server: TestServer, sink: Sink
) -> None:
    await loopback_transport.post(url_of(server, "/plain"), b"raw", {"webhook-id": "m"})
    [(_, headers, body)] = sink.requests
    assert "Content-Type" not in headers
    assert body == b"raw"


async def test_user_agent_is_configurable(server: TestServer, sink: Sink) -> None:
    policy = AddressPolicy(allow_loopback=True)
    async with Transport(policy, user_agent="agent-x/2") as transport:
        await transport.post(url_of(server, "/hook"), BODY, HEADERS)
    assert sink.requests[0][1]["User-Agent"] == "agent-x/2"


async def test_sequential_posts_reuse_one_connection(
    loopback_transport: Transport, server: TestServer, sink: Sink
) -> None:
    for _ in range(3):
        await loopback_transport.post(url_of(server, "/hook"), BODY, HEADERS)
    assert len(sink.peers) == 3
    assert len(set(map(str, sink.peers))) == 1


async def test_redirect_is_returned_not_followed(
    loopback_transport: Transport, server: TestServer, sink: Sink
) -> None:
    result = await loopback_transport.post(url_of(server, "/redirect"), BODY, HEADERS)
    assert result.status == 307
    assert result.headers["Location"] == "/target"
    assert [path for path, _, _ in sink.requests] == ["/redirect"]


async def test_response_body_is_truncated_to_4_kib(
    loopback_transport: Transport, server: TestServer
) -> None:
    result = await loopback_transport.post(url_of(server, "/large"), BODY, HEADERS)
    assert result.status == 500
    assert MAX_RESPONSE_BODY_BYTES == 4096
    assert result.body == (bytes(range(256)) * 400)[:4096]


async def test_status_is_kept_when_the_body_stalls(server: TestServer) -> None:
    policy = AddressPolicy(allow_loopback=True)
    async with Transport(policy, Timeouts(connect=1.0, total=0.5)) as transport:
        result = await transport.post(url_of(server, "/stalled-body"), BODY, HEADERS)
    assert result.status == 200
    assert result.body == b"partial"


# -- failures --------------------------------------------------------------------------


async def test_slow_endpoint_raises_request_timeout(server: TestServer) -> None:
    policy = AddressPolicy(allow_loopback=True)
    async with Transport(policy, Timeouts(connect=1.0, total=0.3)) as transport:
        with pytest.raises(RequestTimeout) as caught:
            await transport.post(url_of(server, "/slow") + "?token=q-secret", BODY, HEADERS)
    assert caught.value.retryable is True
    message = str(caught.value)
    assert "total 0.3 s" in message
    assert SECRET not in message
    assert "q-secret" not in message  # origin only, never the path or query
    assert "slow" not in message
    assert caught.value.__cause__ is None  # aiohttp's own messages embed the full URL


async def test_connection_refused_raises_retryable_connect_error() -> None:
    port = closed_port()
    async with Transport(AddressPolicy(allow_loopback=True)) as transport:
        with pytest.raises(ConnectError) as caught:
            await transport.post(f"http://127.0.0.1:{port}/hook?token=q-secret", BODY, HEADERS)
    assert caught.value.retryable is True
    assert isinstance(caught.value, TransportError)
    assert isinstance(caught.value, A2APushError)
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message
    assert SECRET not in message
    assert "q-secret" not in message
    assert BODY.decode() not in message


async def test_loopback_literal_is_refused_without_allowlist(
    server: TestServer, sink: Sink
) -> None:
    async with Transport(AddressPolicy()) as transport:
        with pytest.raises(AddressRefused) as caught:
            await transport.post(url_of(server, "/hook"), BODY, HEADERS)
    assert caught.value.retryable is False
    assert "loopback" in str(caught.value)
    assert sink.requests == []


async def test_host_name_is_refused_at_connect_time_without_allowlist(
    server: TestServer, sink: Sink
) -> None:
    url = f"http://localhost:{server.port}/hook"
    async with Transport(AddressPolicy()) as transport:
        with pytest.raises(AddressRefused) as caught:
            await transport.post(url, BODY, HEADERS)
    assert caught.value.retryable is False
    assert "localhost" in str(caught.value)
    assert sink.requests == []


async def test_host_name_works_with_allow_loopback(
    loopback_transport: Transport, server: TestServer, sink: Sink
) -> None:
    result = await loopback_transport.post(f"http://localhost:{server.port}/hook", BODY, HEADERS)
    assert result.status == 202
    assert len(sink.requests) == 1


async def test_only_vetted_addresses_are_dialled(server: TestServer, sink: Sink) -> None:
    # A trap listens on 127.0.0.2 at the same port and the name resolves there first:
    # only 127.0.0.1 is allowlisted, so the trap must never see a request.
    trapped = Sink()

    async def trap(request: web.Request) -> web.Response:
        await trapped.record(request)
        return web.Response(status=418)

    trap_app = web.Application()
    trap_app.router.add_post("/hook", trap)
    trap_server = TestServer(trap_app, host="127.0.0.2", port=server.port)
    try:
        await trap_server.start_server()
    except OSError as exc:
        pytest.skip(f"cannot listen on 127.0.0.2: {exc}")
    try:
        dns = FixedResolver({"hooks.test": ["127.0.0.2", "127.0.0.1"]})
        async with Transport(AddressPolicy(["127.0.0.1"]), dns_resolver=dns) as transport:
            result = await transport.post(f"http://hooks.test:{server.port}/hook", BODY, HEADERS)
    finally:
        await trap_server.close()
    assert result.status == 202
    assert len(sink.requests) == 1
    assert trapped.requests == []


async def test_name_resolving_to_private_addresses_is_refused(
    server: TestServer, sink: Sink
) -> None:
    dns = FixedResolver({"rebind.test": ["127.0.0.1"]})
    async with Transport(AddressPolicy(), dns_resolver=dns) as transport:
        with pytest.raises(AddressRefused, match=r"resolves to 127\.0\.0\.1"):
            await transport.post(f"http://rebind.test:{server.port}/hook", BODY, HEADERS)
    assert sink.requests == []


async def test_unresolvable_name_raises_retryable_connect_error() -> None:
    dns = FixedResolver({})
    async with Transport(AddressPolicy(), dns_resolver=dns) as transport:
        with pytest.raises(ConnectError) as caught:
            await transport.post("http://gone.test/hook", BODY, HEADERS)
    assert caught.value.retryable is True


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/x?token=q-secret", "http://u:q-secret@example.com/", "http://0x7f.1/"],
)
async def test_invalid_urls_are_refused_before_dialling(
    loopback_transport: Transport, url: str
) -> None:
    with pytest.raises(AddressRefused) as caught:
        await loopback_transport.post(url, BODY, HEADERS)
    assert caught.value.retryable is False
    assert "q-secret" not in str(caught.value)


async def test_post_before_start_raises() -> None:
    transport = Transport(AddressPolicy())
    with pytest.raises(RuntimeError, match="not started"):
        await transport.post("http://93.184.216.34/", BODY, HEADERS)


async def test_transport_can_be_closed_twice() -> None:
    transport = Transport(AddressPolicy())
    await transport.start()
    await transport.close()
    await transport.close()


# -- Timeouts --------------------------------------------------------------------------


def test_timeouts_default_to_the_design_values() -> None:
    assert Timeouts() == Timeouts(connect=5.0, total=15.0)


@pytest.mark.parametrize(("connect", "total"), [(0, 15.0), (5.0, -1), (5.0, float("inf"))])
def test_timeouts_must_be_positive_and_finite(connect: float, total: float) -> None:
    with pytest.raises(InvalidConfigError, match="positive number of seconds"):
        Timeouts(connect=connect, total=total)


# -- hostile or broken answers -----------------------------------------------------------


async def test_a_stalled_body_does_not_hold_the_attempt_for_the_total_timeout(
    server: TestServer,
) -> None:
    # The status is in: the body (diagnostics only) gets BODY_READ_SECONDS, so a receiver
    # that stalls its body does not hold the endpoint's slot for the whole 10 s.
    policy = AddressPolicy(allow_loopback=True)
    async with Transport(policy, Timeouts(connect=1.0, total=10.0)) as transport:
        result = await asyncio.wait_for(
            transport.post(url_of(server, "/stalled-body"), BODY, HEADERS), 5.0
        )
    assert result.status == 200
    assert result.body == b"partial"


async def raw_server(answer: bytes, *, close: bool = True) -> tuple[asyncio.Server, str]:
    """A server on 127.0.0.1 that reads a request and writes ``answer`` as it is."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if close:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    return srv, f"http://127.0.0.1:{port}/services/T0/B0/SECRET-PATH?token=SECRET-QUERY"


@pytest.mark.parametrize("encoding", ["br", "zstd", "x-unknown"])
async def test_an_answer_in_an_encoding_we_cannot_decode_keeps_its_status(
    loopback_transport: Transport, encoding: str
) -> None:
    # The body is never decoded (it only informs): a 200 in brotli must not become a
    # connection error, retried and in the end dead-lettered.
    body = b"\x8b\x02\x80not really compressed"
    answer = (
        f"HTTP/1.1 200 OK\r\nContent-Encoding: {encoding}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    srv, url = await raw_server(answer)
    async with srv:
        result = await loopback_transport.post(url, BODY, HEADERS)
    assert result.status == 200 and result.body == body


async def test_the_request_asks_for_an_answer_body_as_it_is(
    loopback_transport: Transport, server: TestServer, sink: Sink
) -> None:
    await loopback_transport.post(url_of(server, "/hook"), BODY, HEADERS)
    assert sink.requests[0][1]["Accept-Encoding"] == "identity"


async def test_an_answer_that_breaks_off_is_described_briefly_without_the_url(
    loopback_transport: Transport,
) -> None:
    # 120 headers of 8 KB, then the connection closes: aiohttp's message would embed
    # them all (1.9 MB in every log line and last_error); and no message may carry the
    # URL's secret path or query.
    headers = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 8000) for i in range(120))
    srv, url = await raw_server(b"HTTP/1.1 200 OK\r\n" + headers)
    async with srv:
        with pytest.raises(ConnectError) as caught:
            await loopback_transport.post(url, BODY, HEADERS)
    message = str(caught.value)
    assert len(message) < 500, message[:600]
    assert "SECRET" not in message and "aaaa" not in message


def test_urls_in_error_details_are_cut_to_their_origin_and_long_details_cut_short() -> None:
    # aiohttp writes "Can not write request body for <url>" when a pooled connection
    # closes under a new request (an ordinary keep-alive race).
    exc = aiohttp.ClientOSError(
        None, "Can not write request body for https://hooks.example.com:8443/T0/B0/XX?token=s3"
    )
    assert describe(exc) == (
        "ClientOSError: [Errno None] Can not write request body for https://hooks.example.com:8443"
    )
    for given, shown in [
        ("to <https://h.example/s3cret> failed", "to <https://h.example> failed"),
        ("(http://user:pw@h.example:81/x?t=1)", "(http://h.example:81)"),
        ("HTTPS://H.EXAMPLE;jsessionid=S3CRET", "HTTPS://H.EXAMPLE"),
        ("'http://[2001:db8::1]:8443/hook?token=x'", "'http://[2001:db8::1]:8443'"),
    ]:
        assert describe(OSError(given)) == f"OSError: {shown}"
    long = describe(ValueError("x" * 5000))
    assert len(long) < 400 and long.endswith("(5,000 characters)")
