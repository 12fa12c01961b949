"""A client for agents in another process: post task events to an a2a-push gateway."""

from __future__ import annotations

import uuid
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

from a2a_push.errors import A2APushError
from a2a_push.protocol.types import (
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)

# 408, 425, 429 and every 5xx, as the notifier retries webhooks.
_RETRYABLE_STATUS: Final = frozenset({408, 425, 429, *range(500, 600)})


class GatewayError(A2APushError):
    """The gateway refused an event (``retryable`` False) or stayed unavailable."""

    def __init__(self, message: str, *, status: int | None, retryable: bool) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after: float | None = None


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
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the gateway URL must start with http:// or https://, not {url!r}")
        self.url = url.rstrip("/")
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
        """
        wrapped = event if isinstance(event, StreamResponse) else StreamResponse.wrap(event)
        body = wrapped.to_json_bytes()
        key = idempotency_key or uuid.uuid4().hex
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self._attempts) | stop_after_delay(self._deadline),
            wait=_WaitRetryAfter(10.0),
            retry=retry_if_exception(_retryable),
            reraise=True,
        ):
            with attempt:
                return await self._post(task_id, body, key)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post(self, task_id: str, body: bytes, key: str) -> dict[str, Any]:
        url = f"{self.url}/v1/tasks/{quote(task_id, safe='')}/events"
        headers = {**self._headers, "Idempotency-Key": key}
        try:
            async with self._client().post(
                url, data=body, headers=headers, timeout=self._timeout
            ) as resp:
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise GatewayError(
                f"the gateway at {self.url} is unreachable: {type(exc).__name__}",
                status=None,
                retryable=True,
            ) from exc
        if 200 <= status < 300 and isinstance(data, dict):
            return data
        message = data.get("message") if isinstance(data, dict) else None
        error = GatewayError(
            f"the gateway answered {status}: {message or 'no details'}",
            status=status,
            retryable=status in _RETRYABLE_STATUS,
        )
        if retry_after and retry_after.isdigit():
            error.retry_after = float(retry_after)
        raise error
