"""Calls from the receiver to an agent: GetTask and the push-config methods (JSON-RPC)."""

from __future__ import annotations

import itertools
import json
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from a2a_push import tracing
from a2a_push.httputil import read_at_most
from a2a_push.protocol.constants import HEADER_A2A_VERSION, VERSION_0_3, VERSION_1_0
from a2a_push.protocol.v03 import task_from_v03

from .settings import AgentSettings

_METHOD_NOT_FOUND: Final = -32601
_TASK_NOT_FOUND: Final = -32001
_MAX_RESPONSE_BYTES: Final = 16 * 1024 * 1024

_V03_NAMES: Final = {
    "GetTask": "tasks/get",
    "CreateTaskPushNotificationConfig": "tasks/pushNotificationConfig/set",
    "DeleteTaskPushNotificationConfig": "tasks/pushNotificationConfig/delete",
}


def shown_url(url: str) -> str:
    """``url`` for messages: without a user name or password it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))


class AgentCallError(Exception):
    """An agent call failed. ``retryable`` says whether trying again may help."""

    def __init__(
        self, message: str, *, retryable: bool, code: int | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.code = code
        self.status = status  # the HTTP status of the agent's answer, if there was one

    @property
    def refused_credentials(self) -> bool:
        """The agent answered 401 or 403: it did not accept the receiver's credentials."""
        return self.status in (401, 403)

    @property
    def task_not_found(self) -> bool:
        return self.code == _TASK_NOT_FOUND


class AgentClient:
    """JSON-RPC client for one agent, sharing the receiver's HTTP session."""

    _ids = itertools.count(1)

    def __init__(
        self, agent: AgentSettings, session: aiohttp.ClientSession, *, timeout: float = 15.0
    ) -> None:
        self.agent = agent
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(5.0, timeout))

    @property
    def _v03(self) -> bool:
        return self.agent.protocol_version == VERSION_0_3

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """Call ``method`` (its v1.0 name) and return the JSON-RPC result."""
        name = _V03_NAMES.get(method, method) if self._v03 else method
        headers = {
            "Content-Type": "application/json",
            HEADER_A2A_VERSION: VERSION_0_3 if self._v03 else VERSION_1_0,
        }
        if self.agent.credentials is not None:
            headers["Authorization"] = self.agent.credentials.get_secret_value()
        headers.update(tracing.outgoing_headers())  # {} unless tracing
        payload = {"jsonrpc": "2.0", "id": next(self._ids), "method": name, "params": params}
        try:
            async with self._session.post(
                self.agent.url,
                data=json.dumps(payload).encode(),
                headers=headers,
                timeout=self._timeout,
                allow_redirects=False,
            ) as resp:
                raw = await read_at_most(resp.content, _MAX_RESPONSE_BYTES)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AgentCallError(
                f"{method} to {shown_url(self.agent.url)} failed: {type(exc).__name__}: {exc}",
                retryable=True,
            ) from exc
        url = shown_url(self.agent.url)
        if status >= 500 or status in (408, 425, 429):
            raise AgentCallError(
                f"{method} to {url}: the agent answered HTTP {status}", retryable=True
            )
        if raw is None:
            raise AgentCallError(f"{method}: the agent's response is too large", retryable=False)
        # Anything but a JSON-RPC answer usually means the URL is not the agent's JSON-RPC
        # endpoint (its card, a REST binding, a path that does not exist), or that the
        # agent refused the receiver's credentials: say which to check.
        if status in (401, 403):
            endpoint = "; check this agent's `credentials` (the Authorization value sent)"
        else:
            endpoint = f"; is {url} the agent's JSON-RPC endpoint?"
        try:
            data = json.loads(raw)
        except ValueError:
            raise AgentCallError(
                f"{method} to {url}: the agent answered HTTP {status} without a JSON-RPC "
                f"body{endpoint}",
                retryable=False,
            ) from None
        if not isinstance(data, dict):
            raise AgentCallError(
                f"{method} to {url}: HTTP {status} with a body that is not a JSON-RPC "
                f"response{endpoint}",
                retryable=False,
            )
        error = data.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            refused = endpoint if status in (401, 403) else ""
            raise AgentCallError(
                f"{method}: agent error {code}: {error.get('message')}{refused}",
                retryable=code == -32603,
                code=code if isinstance(code, int) else None,
                status=status,
            )
        if status != 200 or not ("result" in data or data.get("jsonrpc") == "2.0"):
            raise AgentCallError(
                f"{method} to {url}: the agent answered HTTP {status} without a JSON-RPC "
                f"result{endpoint}",
                retryable=False,
            )
        # A success without "result" means null: the a2a-sdk's v0.3 adapter serializes
        # with exclude_none, so its tasks/pushNotificationConfig/delete answers that way.
        return data.get("result")

    async def get_task(self, task_id: str, history_length: int | None = None) -> dict[str, Any]:
        """The task as a v1.0 JSON object (a v0.3 agent's answer is converted)."""
        params: dict[str, Any] = {"id": task_id}
        length = history_length if history_length is not None else self.agent.history_length
        if length is not None:
            params["historyLength"] = length
        answer = await self.call("GetTask", params)
        if not isinstance(answer, dict):
            raise AgentCallError("GetTask: the result is not a task object", retryable=False)
        result: dict[str, Any] = answer
        if self._v03:
            try:
                result = task_from_v03(result).to_json_dict()
            except ValueError as exc:  # V03FormatError and pydantic's ValidationError
                raise AgentCallError(f"GetTask: not a v0.3 task: {exc}", retryable=False) from exc
        if result.get("id") != task_id:
            raise AgentCallError("GetTask: the agent returned another task", retryable=False)
        return result

    async def create_push_config(
        self, task_id: str, config_id: str, url: str, token: str
    ) -> dict[str, Any]:
        if self._v03:
            params: dict[str, Any] = {
                "taskId": task_id,
                "pushNotificationConfig": {"id": config_id, "url": url, "token": token},
            }
        else:
            params = {"taskId": task_id, "id": config_id, "url": url, "token": token}
        result = await self.call("CreateTaskPushNotificationConfig", params)
        if not isinstance(result, dict):
            raise AgentCallError("CreateTaskPushNotificationConfig: bad result", retryable=False)
        return result

    async def delete_push_config(self, task_id: str, config_id: str) -> None:
        if self._v03:
            params = {"id": task_id, "pushNotificationConfigId": config_id}
        else:
            params = {"taskId": task_id, "id": config_id}
        await self.call("DeleteTaskPushNotificationConfig", params)
