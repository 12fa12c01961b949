"""A client for agents in another process: post task events to an a2a-push gateway."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from yarl import URL

from a2a_push import tracing
from a2a_push.errors import A2APushError
from a2a_push.protocol.types import (
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)

# 408, 425, 429 and every 5xx, as the notifier retries webhooks.
_RETRYABLE_STATUS: Final = frozenset({408, 425, 429, *range(500, 600)})

# The authority of a URL as written: "user:password@host:port" (as the SSRF policy reads it).
_AUTHORITY: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#]*)")
_BARE_AUTHORITY: Final = re.compile(r"(//)?([^/?#]*)")


def redact_url(url: str) -> str:
    """``url`` for messages: any user-info (``user:password@``) becomes ``***@``, also
    in a URL written without its scheme."""
    match = _AUTHORITY.match(url) or _BARE_AUTHORITY.match(url)
    if match is None or "@" not in match.group(2):
        return url
    prefix, authority = match.group(1) or "", match.group(2)
    return f"{prefix}***@{authority.rpartition('@')[2]}{url[match.end() :]}"


def check_gateway_url(url: str, what: str = "the gateway URL") -> str:
    """``url`` without trailing slashes, or a ValueError saying what is wrong with it
    (never echoing credentials): it must be http(s), name a host, and carry no user-info,
    query or fragment. A path is kept: a gateway may be served under one."""
    shown = redact_url(url)
    if not url.startswith(("http://", "https://")):
        raise ValueError(
            f"{what} must be an http(s):// URL, e.g. http(s)://host:port, not {shown!r}"
        )
    match = _AUTHORITY.match(url)
    authority = match.group(2) if match is not None else ""
    if "@" in authority:
        raise ValueError(
            f"{what} {shown} must not contain user-info ('user:password@'); the gateway "
            "authenticates with an API key, not credentials in the URL"
        )
    if not authority:
        raise ValueError(f"{what} {shown} has no host; expected e.g. http://127.0.0.1:8080")
    if "?" in url or "#" in url:
        # Not the query itself: it may hold a key.
        base = shown.split("?", 1)[0].split("#", 1)[0]
        raise ValueError(
            f"{what} {base}?… must not have a ?query or #fragment; give the gateway's base "
            "URL, e.g. http://127.0.0.1:8080"
        )
    return url.rstrip("/")


def describe_answer(status: int, content_type: str | None) -> str:
    """``got HTTP 404, text/plain``: what a URL answered that was not a gateway's JSON."""
    media = printable((content_type or "").split(";", 1)[0].strip()) or "no content type"
    return f"got HTTP {status}, {media}"


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (ESC, BEL, CR...: what
    fakes output or retitles a window) shown escaped, as ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def describe_connection_error(exc: BaseException, timeout: float | None = None) -> str:
    """Why a request got no answer, in a few words: ``connection refused``, ``the host
    name does not resolve``, ``no answer within 15 s``..."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "the host name does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "its TLS certificate is not trusted"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "the TLS handshake failed"
    if isinstance(exc, TimeoutError):
        return "no answer in time" if timeout is None else f"no answer within {timeout:g} s"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the connection closed before an answer"
    os_error = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(os_error, OSError) and os_error.errno and os_error.errno > 0:
        return os.strerror(os_error.errno).lower()  # "connection refused", ...
    return type(exc).__name__


class GatewayError(A2APushError):
    """The gateway refused a request (``retryable`` False) or stayed unavailable.

    ``tries``: the attempts made before giving up; ``elapsed``: the seconds they took.
    """

    def __init__(self, message: str, *, status: int | None, retryable: bool) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after: float | None = None
        self.tries = 1
        self.elapsed = 0.0


class GatewayUnreachableError(GatewayError):
    """No answer from the gateway at all; ``cause`` says why (``connection refused``,
    ``no answer within 15 s``, ...). Always retryable."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(
            f"cannot reach the gateway at {url} ({cause})", status=None, retryable=True
        )
        self.cause = cause


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, GatewayError) and exc.retryable


class _WaitRetryAfter:
    """Exponential backoff with jitter, but never less than the gateway's Retry-After."""

    def __init__(self, maximum: float) -> None:
        self._backoff = wait_exponential_jitter(multiplier=0.1, max=maximum)
        self._max = maximum

    def __call__(self, state: RetryCallState) -> float:
        wait = float(self._backoff(state))
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, GatewayError) and exc.retry_after is not None:
            wait = max(wait, min(exc.retry_after, self._max))
        return wait


class GatewayClient:
    """Posts events to ``POST {url}/v1/tasks/{taskId}/events`` with the agent's API key.

    Each event is retried (tenacity: exponential backoff with jitter, ``Retry-After``
    honoured) on connection errors, timeouts and 408/425/429/5xx, for at most
    ``attempts`` tries or ``deadline`` seconds; a 4xx raises :class:`GatewayError` at once.
    :meth:`whoami` checks the gateway and the key (``GET /v1/agent``).
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        session: aiohttp.ClientSession | None = None,
        attempts: int = 8,
        deadline: float = 60.0,
        timeout: float = 15.0,
    ) -> None:
        self.url = check_gateway_url(url)
        self._host = URL(self.url).host or ""
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._session = session
        self._owns_session = session is None
        self._attempts = attempts
        self._deadline = deadline
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def publish(
        self,
        task_id: str,
        event: Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent | StreamResponse,
        *,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Post one event; the gateway's answer (``seq``, ``deliveries``) once it is durable.

        Every retry carries the same ``Idempotency-Key`` (a fresh one per call unless
        given), so an event whose first answer was lost is not queued twice.

        When tracing (:mod:`a2a_push.tracing`), the post is an ``a2a_push post event``
        span (a child of the current span, if any) whose W3C ``traceparent`` goes on
        the request: the gateway's publish, its attempts and the receiver continue it.
        """
        wrapped = event if isinstance(event, StreamResponse) else StreamResponse.wrap(event)
        body = wrapped.to_json_bytes()
        key = idempotency_key or uuid.uuid4().hex
        path = f"/v1/tasks/{quote(task_id, safe='')}/events"
        started, tries = time.monotonic(), 0
        with tracing.client_span(
            "a2a_push post event",
            tracing.current_context(),
            **{"a2a_push.task_id": task_id, "server.address": self._host},
        ):
            headers = {"Idempotency-Key": key, **tracing.outgoing_headers()}
            try:
                async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(self._attempts) | stop_after_delay(self._deadline),
                    wait=_WaitRetryAfter(10.0),
                    retry=retry_if_exception(_retryable),
                    reraise=True,
                ):
                    with attempt:
                        tries += 1
                        answer = await self._request("POST", path, body, headers)
                        tracing.annotate(**{"a2a_push.tries": tries})
                        return answer
            except GatewayError as exc:
                exc.tries, exc.elapsed = tries, time.monotonic() - started
                tracing.annotate(**{"a2a_push.tries": tries})
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def whoami(self) -> str:
        """The id of the agent this client's key belongs to (``GET /v1/agent``), asked
        once, without retries: a check that the gateway answers and takes the key.

        Raises :class:`GatewayUnreachableError` when nothing answers, and
        :class:`GatewayError` for any answer but the id (``status`` 401: the gateway
        refused the key).
        """
        data = await self._request("GET", "/v1/agent")
        agent_id = data.get("agentId")
        if not isinstance(agent_id, str):
            raise GatewayError(
                f"{self.url} did not answer like an a2a-push gateway (no agentId)",
                status=200,
                retryable=False,
            )
        return agent_id

    async def _request(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] = {}
    ) -> dict[str, Any]:
        """One request: the JSON object of a 2xx answer, else a GatewayError."""
        try:
            async with self._client().request(
                method,
                self.url + path,
                data=body,
                headers={**self._headers, **headers},
                timeout=self._timeout,
            ) as resp:
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
                content_type = resp.headers.get("Content-Type")
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = None
        except (aiohttp.ClientError, TimeoutError) as exc:
            cause = describe_connection_error(exc, self._timeout.total)
            raise GatewayUnreachableError(self.url, cause) from exc
        if 200 <= status < 300 and isinstance(data, dict):
            return data
        if isinstance(data, dict):
            text = f"the gateway answered {status}: {data.get('message') or 'no details'}"
        else:
            # Not JSON (a proxy's error page, a wrong path): say so, not a decode error.
            text = (
                f"{self.url} did not answer like an a2a-push gateway "
                f"({describe_answer(status, content_type)})"
            )
        error = GatewayError(text, status=status, retryable=status in _RETRYABLE_STATUS)
        if retry_after and retry_after.isdigit():
            error.retry_after = float(retry_after)
        raise error
