"""The push-config routes' bodies and answers as pydantic models, for their OpenAPI
operations: the JSON-RPC envelope (parsed by :mod:`a2a_push.protocol.jsonrpc`), the
list answer and the REST error (google.rpc.Status). The configs themselves are
:class:`~a2a_push.protocol.types.TaskPushNotificationConfig`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..protocol.types import TaskPushNotificationConfig


class JsonRpcRequest(BaseModel):
    """A JSON-RPC 2.0 request (or a batch of them: a list): one of the push-config
    methods, e.g. ``CreateTaskPushNotificationConfig`` (v1.0) or
    ``tasks/pushNotificationConfig/set`` (v0.3, chosen by the ``A2A-Version`` header)."""

    jsonrpc: Literal["2.0"]
    id: str | int | None = None
    method: str
    params: dict[str, Any] | None = None


class JsonRpcErrorObject(BaseModel):
    """A JSON-RPC error: code (A2A codes in -32001..-32099), message and details."""

    model_config = ConfigDict(title="JsonRpcError")

    code: int
    message: str
    data: Any = None


class JsonRpcResponse(BaseModel):
    """A JSON-RPC 2.0 response: ``result`` or ``error``."""

    jsonrpc: Literal["2.0"]
    id: str | int | None
    result: Any = None
    error: JsonRpcErrorObject | None = None


class ConfigList(BaseModel):
    """``GET .../pushNotificationConfigs``: a page of the task's configs."""

    model_config = ConfigDict(title="ListTaskPushNotificationConfigsResponse")

    configs: list[TaskPushNotificationConfig]
    next_page_token: str = Field(alias="nextPageToken", description="empty on the last page")


class RestStatus(BaseModel):
    """A google.rpc.Status: HTTP status, gRPC status name, message and ErrorInfo details."""

    code: int
    status: str
    message: str
    details: Any = None


class RestError(BaseModel):
    """A refusal of a push-config REST route."""

    error: RestStatus


class Jwks(BaseModel):
    """A JSON Web Key Set (RFC 7517): the public keys webhooks are signed with."""

    model_config = ConfigDict(title="JWKS")

    keys: list[dict[str, Any]]
