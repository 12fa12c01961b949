"""HTTP transport for webhook POSTs: one aiohttp session dialling only vetted addresses."""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Self

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

from a2a_push.delivery.ssrf import AddressPolicy, VettedResolver
from a2a_push.endpoints import shown_endpoint
from a2a_push.errors import A2APushError, InvalidConfigError, UnsafeURLError

__all__ = [
    "MAX_RESPONSE_BODY_BYTES",
    "AddressRefused",
    "ConnectError",
    "HTTPResult",
    "RequestTimeout",
    "Timeouts",
    "Transport",
    "TransportError",
]

# The response body is kept for diagnostics only; a hostile endpoint must not make us
# buffer more than this.
MAX_RESPONSE_BODY_BYTES: Final = 4 * 1024
# How long the body of an answer may take once its status is in (it only informs).
BODY_READ_SECONDS: Final = 1.0
# Error messages (logged, and kept as a delivery's last_error) are cut to this length.
MAX_ERROR_DETAIL: Final = 300
# An http(s) URL: its scheme (group 1), any user-info, its host and port (group 2), and
# any path, parameters, query or fragment; it ends at a space, a quote or a bracket.
_URL: Final = re.compile(
    r"(https?://)(?:[^/?#\s'\"<>()@]*@)?([^/?#;\s'\"<>()@]*)(?:[/?#;][^\s'\"<>()]*)?",
    re.IGNORECASE,
)
# Above any total timeout: aiohttp then never rounds a timeout up to a whole second.
_NO_ROUNDING: Final = 1e9

# Vetted answers only (the resolver filters before aiohttp caches), so caching is safe.
DEFAULT_DNS_CACHE_TTL_SECONDS: Final = 10

# Webhook URLs repeat across deliveries; remembering which ones passed validation keeps
# URL parsing off the hot path. Bounded so arbitrary URLs cannot grow it without limit.
_VALIDATED_URL_CACHE_SIZE: Final = 4096


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-request time limits in seconds: ``connect`` (per socket) and ``total``."""

    connect: float = 5.0
    total: float = 15.0

    def __post_init__(self) -> None:
        for name in ("connect", "total"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise InvalidConfigError(
                    f"timeouts.{name}", f"must be a positive number of seconds, got {value!r}"
                )


@dataclass(frozen=True, slots=True)
class HTTPResult:
    """A received HTTP response: status, headers, the first 4 KiB of the body, seconds taken."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed: float


class TransportError(A2APushError):
    """A POST produced no HTTP response. ``retryable`` says whether trying again may help.

    Messages name the destination origin and the cause, never request headers or bodies.
    """

    default_retryable: bool = True
    # Why there was no response, for the attempt history and its metric (one of
    # a2a_push.store.ATTEMPT_ERROR_CLASSES).
    default_error_class: str = "connect"

    def __init__(
        self, message: str, *, retryable: bool | None = None, error_class: str | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = self.default_retryable if retryable is None else retryable
        self.error_class = self.default_error_class if error_class is None else error_class


class ConnectError(TransportError):
    """Connecting or talking to the endpoint failed (refused, reset, DNS failure, TLS)."""


class RequestTimeout(TransportError):
    """The connect or total time limit ran out."""

    default_error_class = "timeout"


class AddressRefused(TransportError):
    """The URL guard refused the destination (SSRF policy or an invalid URL); not retryable."""

    default_retryable = False
    default_error_class = "ssrf"


class Transport:
    """Posts webhook bodies over one pooled aiohttp session whose resolver is SSRF-vetted.

    Redirects are never followed (a 3xx comes back as an :class:`HTTPResult`), no
    ``Content-Type`` is added on the caller's behalf, environment proxies are ignored
    and cookies are not kept. ``dns_resolver`` replaces the system resolver underneath
    the vetting (e.g. an aiodns resolver); its answers are still filtered by ``policy``,
    and it is closed with the transport.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        timeouts: Timeouts = Timeouts(),
        *,
        limit: int = 256,
        limit_per_host: int = 16,
        user_agent: str = "a2a-push/0.1",
        dns_cache_ttl: int = DEFAULT_DNS_CACHE_TTL_SECONDS,
        dns_resolver: AbstractResolver | None = None,
    ) -> None:
        self._policy = policy
        self._timeouts = timeouts
        self._limit = limit
        self._limit_per_host = limit_per_host
        self._user_agent = user_agent
        self._dns_cache_ttl = dns_cache_ttl
        self._dns_resolver = dns_resolver
        self._client_timeout = aiohttp.ClientTimeout(
            total=timeouts.total,
            sock_connect=timeouts.connect,
            # aiohttp rounds a timeout of 5 s or more up to a whole second; the lease
            # arithmetic counts on ``total`` exactly.
            ceil_threshold=_NO_ROUNDING,
        )
        self._session: aiohttp.ClientSession | None = None
        self._resolver: VettedResolver | None = None
        self._validated: dict[str, URL] = {}

    @property
    def policy(self) -> AddressPolicy:
        """The SSRF policy every request is checked against."""
        return self._policy

    @property
    def timeouts(self) -> Timeouts:
        """The time limits applied to every request."""
        return self._timeouts

    @property
    def limit(self) -> int:
        """Connections open at once, to all hosts."""
        return self._limit

    @property
    def limit_per_host(self) -> int:
        """Connections open at once to one host."""
        return self._limit_per_host

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran (and :meth:`close` has not)."""
        return self._session is not None

    async def start(self) -> None:
        """Open the session and connection pool (idempotent)."""
        if self._session is not None:
            return
        resolver = VettedResolver(self._policy, self._dns_resolver)
        connector = aiohttp.TCPConnector(
            resolver=resolver,
            limit=self._limit,
            limit_per_host=self._limit_per_host,
            ttl_dns_cache=self._dns_cache_ttl,
        )
        self._resolver = resolver
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._client_timeout,
            # The body of an answer is diagnostics only: asked for as it is, and never
            # decompressed (an encoding we cannot decode, br or zstd, would otherwise
            # turn an accepted webhook into an error, and a compressed bomb costs memory).
            headers={"User-Agent": self._user_agent, "Accept-Encoding": "identity"},
            auto_decompress=False,
            # The caller owns Content-Type; aiohttp would otherwise add octet-stream.
            skip_auto_headers=("Content-Type",),
            # A proxy would be dialled instead of the vetted address, defeating the guard.
            trust_env=False,
            # Endpoints must not be able to plant state that later requests carry.
            cookie_jar=aiohttp.DummyCookieJar(),
            raise_for_status=False,
        )

    async def close(self) -> None:
        """Close the session, its pooled connections and the resolver."""
        session, resolver = self._session, self._resolver
        self._session = self._resolver = None
        if session is not None:
            await session.close()
        if resolver is not None:
            await resolver.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> HTTPResult:
        """POST ``body`` with ``headers`` to ``url``; the URL is re-checked against the policy.

        Only transport headers are added (Host, Content-Length, User-Agent, Accept...),
        never Content-Type. Returns any HTTP response, 3xx included. Raises
        :class:`AddressRefused`, :class:`ConnectError` or :class:`RequestTimeout` when
        there is none.
        """
        session = self._session
        if session is None:
            raise RuntimeError("Transport is not started; await start() or use 'async with'")
        target = self._validated.get(url)
        if target is None:
            target = self._validate(url)
        started = time.perf_counter()
        # The error is raised after the except blocks, so that it keeps no link to the
        # aiohttp exception (__context__) and through its traceback to the request's
        # objects: under timeouts those would pile up as cyclic garbage, which only a
        # full (slow) garbage collection frees.
        failure: TransportError
        try:
            async with session.post(
                target, data=body, headers=headers, allow_redirects=False
            ) as response:
                # The status is in: the body gets a short while, not the rest of the
                # total timeout (a body that stalls must not hold the endpoint's slot).
                chunks: list[bytes] = []
                stream = response.content
                if stream.is_eof():
                    # All of it is in already (a short answer comes with its status):
                    # reading it never waits, so no timer is set for it.
                    await _read_prefix(stream, MAX_RESPONSE_BODY_BYTES, chunks)
                else:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(BODY_READ_SECONDS, self._timeouts.total)):
                            await _read_prefix(stream, MAX_RESPONSE_BODY_BYTES, chunks)
                content = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                return HTTPResult(
                    status=response.status,
                    headers=response.headers,
                    body=content,
                    elapsed=time.perf_counter() - started,
                )
        except UnsafeURLError as exc:
            failure = AddressRefused(f"POST {_origin(target)} refused: {exc.message}")
        except TimeoutError as exc:
            # Before OSError/ClientError: aiohttp's timeouts subclass both.
            failure = RequestTimeout(self._timeout_message(target, exc))
        except aiohttp.InvalidURL:
            failure = AddressRefused(f"POST {_origin(target)} refused: invalid URL")
        except aiohttp.ClientError as exc:
            refused = _unsafe_cause(exc)
            if refused is not None:
                failure = AddressRefused(f"POST {_origin(target)} refused: {refused.message}")
            else:
                failure = ConnectError(
                    f"POST {_origin(target)} failed: {describe(exc)}",
                    error_class=connect_error_class(exc),
                )
            refused = None
        except OSError as exc:
            failure = ConnectError(
                f"POST {_origin(target)} failed: {describe(exc)}",
                error_class=connect_error_class(exc),
            )
        try:
            raise failure
        finally:
            del failure  # else its traceback holds this frame, which holds it: a cycle

    def _validate(self, url: str) -> URL:
        try:
            target = self._policy.validate_url(url)
        except InvalidConfigError as exc:
            # Only the reason: the URL itself may carry secrets in its query string.
            raise AddressRefused(f"refused URL: {exc.message}") from None
        if len(self._validated) >= _VALIDATED_URL_CACHE_SIZE:
            self._validated.clear()
        self._validated[url] = target
        return target

    def _timeout_message(self, target: URL, exc: BaseException) -> str:
        limits = f"connect {self._timeouts.connect} s, total {self._timeouts.total} s"
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return f"POST {_origin(target)}: could not connect in time ({limits})"
        return f"POST {_origin(target)}: no response in time ({limits})"


async def _read_prefix(stream: aiohttp.StreamReader, limit: int, chunks: list[bytes]) -> None:
    # The status decides the outcome; the body is diagnostics. A body that breaks off or
    # stalls after the status line must not turn an accepted delivery into a retry.
    remaining = limit
    try:
        while remaining > 0:
            chunk = await stream.read(remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except (aiohttp.ClientError, TimeoutError):
        pass


def connect_error_class(exc: BaseException) -> str:
    """The error class of a failure to get an answer other than a time-out or a refusal
    by the URL guard: dns, tls, refused (nothing listens), reset (the connection broke
    off before the answer), else connect."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "dns"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return "tls"
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return "refused"
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | ConnectionResetError
        | BrokenPipeError,
    ) or isinstance(cause, ConnectionResetError):
        return "reset"
    return "connect"


def _origin(url: URL) -> str:
    # Never the path or query: webhook URLs sometimes embed tokens. (As logs and events
    # show an endpoint: the default port written out.)
    return shown_endpoint(str(url))


def _unsafe_cause(exc: BaseException) -> UnsafeURLError | None:
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain; bounded in case of cycles
        if seen is None:
            return None
        if isinstance(seen, UnsafeURLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def describe(exc: BaseException) -> str:
    """``exc`` for a log line or a delivery's ``last_error``: its type and message, with
    every URL cut to its origin and at most MAX_ERROR_DETAIL characters. The endpoint
    controls much of what aiohttp puts there: a request URL with its secret path or
    query ("Can not write request body for <url>"), the raw status line, or every
    header of a response that broke off."""
    name = type(exc).__name__
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"{name}: the server closed the connection before answering in full"
    # ClientResponseError's str() embeds the full URL; its message alone is the reason.
    detail = exc.message if isinstance(exc, aiohttp.ClientResponseError) else str(exc)
    detail = _URL.sub(r"\1\2", str(detail))
    if len(detail) > MAX_ERROR_DETAIL:
        detail = detail[:MAX_ERROR_DETAIL] + f"... ({len(detail):,} characters)"
    return f"{name}: {detail}" if detail else name
