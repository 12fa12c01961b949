"""JSON-RPC 2.0 envelope for the A2A binding: error codes, A2AError, request parsing.

Every error code is defined once here, with its HTTP status (spec §5.4; §9.5 and
docs/protocol.md for the standard JSON-RPC codes) and its ``google.rpc.ErrorInfo``
reason: the spec's error type name in UPPER_SNAKE_CASE without "Error"
(``TaskNotFoundError`` -> ``TASK_NOT_FOUND``). The spec mandates ErrorInfo for
the A2A-specific codes; the standard codes get one too, by the same rule
(``JSONParseError`` -> ``JSON_PARSE``), so every error reads the same way, except
``INTERNAL_ERROR``: the reason the official a2a-sdk's REST client maps back to its
InternalError.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel

from a2a_push.errors import A2APushError
from a2a_push.protocol.types import A2AModel

__all__ = [
    "BAD_REQUEST_TYPE",
    "CONTENT_TYPE_NOT_SUPPORTED",
    "ERRORS",
    "ERROR_DOMAIN",
    "ERROR_INFO_TYPE",
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    "EXTENSION_SUPPORT_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_AGENT_RESPONSE",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "JSONRPC_VERSION",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PUSH_NOTIFICATION_NOT_SUPPORTED",
    "TASK_NOT_CANCELABLE",
    "TASK_NOT_FOUND",
    "UNSUPPORTED_OPERATION",
    "VERSION_NOT_SUPPORTED",
    "A2AError",
    "ErrorKind",
    "JSONRPCError",
    "JSONRPCErrorResponse",
    "JSONRPCRequest",
    "JSONRPCSuccessResponse",
    "failure",
    "parse_request",
    "success",
]

JSONRPC_VERSION: Final = "2.0"

# Standard JSON-RPC 2.0 codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# A2A-specific codes (spec §5.4).
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED: Final = -32003
UNSUPPORTED_OPERATION: Final = -32004
CONTENT_TYPE_NOT_SUPPORTED: Final = -32005
INVALID_AGENT_RESPONSE: Final = -32006
EXTENDED_AGENT_CARD_NOT_CONFIGURED: Final = -32007  # v0.3: AuthenticatedExtendedCard...
EXTENSION_SUPPORT_REQUIRED: Final = -32008
VERSION_NOT_SUPPORTED: Final = -32009

ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE: Final = "type.googleapis.com/google.rpc.BadRequest"
ERROR_DOMAIN: Final = "a2a-protocol.org"


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """What one error code means: spec name, ErrorInfo reason, HTTP status, default message."""

    code: int
    name: str
    reason: str
    http_status: int
    message: str


def _kinds(*kinds: ErrorKind) -> Mapping[int, ErrorKind]:
    return MappingProxyType({k.code: k for k in kinds})


ERRORS: Final[Mapping[int, ErrorKind]] = _kinds(
    ErrorKind(PARSE_ERROR, "JSONParseError", "JSON_PARSE", 400, "Invalid JSON payload"),
    ErrorKind(
        INVALID_REQUEST,
        "InvalidRequestError",
        "INVALID_REQUEST",
        400,
        "Request payload validation error",
    ),
    ErrorKind(METHOD_NOT_FOUND, "MethodNotFoundError", "METHOD_NOT_FOUND", 404, "Method not found"),
    ErrorKind(INVALID_PARAMS, "InvalidParamsError", "INVALID_PARAMS", 400, "Invalid parameters"),
    ErrorKind(INTERNAL_ERROR, "InternalError", "INTERNAL_ERROR", 500, "Internal error"),
    ErrorKind(TASK_NOT_FOUND, "TaskNotFoundError", "TASK_NOT_FOUND", 404, "Task not found"),
    ErrorKind(
        TASK_NOT_CANCELABLE,
        "TaskNotCancelableError",
        "TASK_NOT_CANCELABLE",
        400,
        "Task cannot be canceled",
    ),
    ErrorKind(
        PUSH_NOTIFICATION_NOT_SUPPORTED,
        "PushNotificationNotSupportedError",
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
        400,
        "Push notifications are not supported",
    ),
    ErrorKind(
        UNSUPPORTED_OPERATION,
        "UnsupportedOperationError",
        "UNSUPPORTED_OPERATION",
        400,
        "This operation is not supported",
    ),
    ErrorKind(
        CONTENT_TYPE_NOT_SUPPORTED,
        "ContentTypeNotSupportedError",
        "CONTENT_TYPE_NOT_SUPPORTED",
        400,
        "Incompatible content types",
    ),
    ErrorKind(
        INVALID_AGENT_RESPONSE,
        "InvalidAgentResponseError",
        "INVALID_AGENT_RESPONSE",
        500,
        "Invalid agent response",
    ),
    ErrorKind(
        EXTENDED_AGENT_CARD_NOT_CONFIGURED,
        "ExtendedAgentCardNotConfiguredError",
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        400,
        "Extended agent card is not configured",
    ),
    ErrorKind(
        EXTENSION_SUPPORT_REQUIRED,
        "ExtensionSupportRequiredError",
        "EXTENSION_SUPPORT_REQUIRED",
        400,
        "A required extension is not supported by the client",
    ),
    ErrorKind(
        VERSION_NOT_SUPPORTED,
        "VersionNotSupportedError",
        "VERSION_NOT_SUPPORTED",
        400,
        "Protocol version is not supported",
    ),
)

# Codes we do not know (from a remote peer) are treated as server errors.
_UNKNOWN_HTTP_STATUS: Final = 500


class A2AError(A2APushError):
    """An A2A / JSON-RPC error, ready to be sent as ``error`` or mapped to an HTTP status.

    ``data`` is the list sent as ``error.data``: a ``google.rpc.ErrorInfo`` entry
    (reason, domain ``a2a-protocol.org``, ``metadata``) followed by ``details``.
    ``request_id`` is the id of the offending request when it could be read.
    """

    def __init__(
        self,
        code: int,
        message: str | None = None,
        *,
        metadata: Mapping[str, object] | None = None,
        details: Sequence[Mapping[str, Any]] = (),
        request_id: str | int | None = None,
    ) -> None:
        self.kind: ErrorKind | None = ERRORS.get(code)
        self.code = code
        self.message = message or (self.kind.message if self.kind else "Error")
        # google.rpc.ErrorInfo.metadata is map<string, string>.
        self.metadata: dict[str, str] = {k: str(v) for k, v in (metadata or {}).items()}
        self.details: list[dict[str, Any]] = [dict(d) for d in details]
        self.request_id = request_id
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"A2AError(code={self.code}, message={self.message!r})"

    @property
    def reason(self) -> str | None:
        """The ErrorInfo reason (``TASK_NOT_FOUND``, ...); None for a code we do not know."""
        return self.kind.reason if self.kind else None

    @property
    def http_status(self) -> int:
        """The HTTP status this error maps to (spec §5.4)."""
        return self.kind.http_status if self.kind else _UNKNOWN_HTTP_STATUS

    @property
    def data(self) -> list[dict[str, Any]]:
        """The ``error.data`` list: the ErrorInfo entry (for known codes), then ``details``."""
        entries: list[dict[str, Any]] = []
        if self.kind is not None:
            info: dict[str, Any] = {
                "@type": ERROR_INFO_TYPE,
                "reason": self.kind.reason,
                "domain": ERROR_DOMAIN,
            }
            if self.metadata:
                info["metadata"] = dict(self.metadata)
            entries.append(info)
        entries.extend(dict(d) for d in self.details)
        return entries

    def to_error_dict(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object: ``{"code", "message", "data": [...]}``."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        data = self.data
        if data:
            out["data"] = data
        return out

    @classmethod
    def from_error_dict(cls, error: Mapping[str, Any]) -> A2AError:
        """Rebuild an error received from a peer (``error`` of a JSON-RPC response).

        Raises ValueError when ``error`` is not a JSON-RPC error object.
        """
        code, message = error.get("code"), error.get("message")
        if isinstance(code, bool) or not isinstance(code, int) or not isinstance(message, str):
            raise ValueError("a JSON-RPC error needs an integer code and a string message")
        data = error.get("data")
        details = [d for d in data if isinstance(d, Mapping)] if isinstance(data, list) else []
        metadata: Mapping[str, object] = {}
        if code in ERRORS:
            # Our own ErrorInfo entry is rebuilt from the code; keep only its metadata.
            info = next((d for d in details if d.get("@type") == ERROR_INFO_TYPE), None)
            if info is not None:
                details.remove(info)
                found = info.get("metadata")
                metadata = found if isinstance(found, Mapping) else {}
        return cls(code, message, metadata=metadata, details=details)

    # ----------------------------------------------------------- factories, one per kind

    @classmethod
    def parse_error(cls, detail: str | None = None) -> A2AError:
        """The body is not valid JSON (-32700)."""
        return cls(PARSE_ERROR, detail)

    @classmethod
    def invalid_request(
        cls, detail: str | None = None, *, request_id: str | int | None = None
    ) -> A2AError:
        """The JSON is not a valid JSON-RPC request object (-32600)."""
        return cls(INVALID_REQUEST, detail, request_id=request_id)

    @classmethod
    def method_not_found(cls, method: str) -> A2AError:
        """No such method (-32601)."""
        return cls(METHOD_NOT_FOUND, f"Method not found: {method}", metadata={"method": method})

    @classmethod
    def invalid_params(cls, message: str, field: str | None = None) -> A2AError:
        """The params are invalid (-32602); ``field`` adds a ``google.rpc.BadRequest`` entry."""
        if field is None:
            return cls(INVALID_PARAMS, message)
        violation = {"field": field, "description": message}
        return cls(
            INVALID_PARAMS,
            message,
            metadata={"field": field},
            details=[{"@type": BAD_REQUEST_TYPE, "fieldViolations": [violation]}],
        )

    @classmethod
    def from_validation_error(cls, exc: ValidationError, prefix: str | None = None) -> A2AError:
        """Invalid params from a pydantic error: the first problem, its field in camelCase.

        The offending input is never echoed (it may be a secret).
        """
        first = exc.errors(include_input=False, include_url=False)[0]
        parts = [prefix] if prefix else []
        parts.extend(to_camel(p) if isinstance(p, str) else str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        field = ".".join(parts) or None
        return cls.invalid_params(f"{field}: {msg}" if field else msg, field)

    @classmethod
    def internal_error(cls, detail: str | None = None) -> A2AError:
        """An unexpected server failure (-32603); keep internals out of ``detail``."""
        return cls(INTERNAL_ERROR, detail)

    @classmethod
    def task_not_found(cls, task_id: str) -> A2AError:
        """The task does not exist or is not visible to the caller (-32001)."""
        return cls(TASK_NOT_FOUND, metadata={"taskId": task_id})

    @classmethod
    def task_not_cancelable(cls, task_id: str) -> A2AError:
        """The task is in a state where it cannot be canceled (-32002)."""
        return cls(TASK_NOT_CANCELABLE, metadata={"taskId": task_id})

    @classmethod
    def push_notification_not_supported(cls) -> A2AError:
        """The agent card says ``pushNotifications: false`` (-32003)."""
        return cls(PUSH_NOTIFICATION_NOT_SUPPORTED)

    @classmethod
    def unsupported_operation(cls, detail: str | None = None) -> A2AError:
        """The operation (or an aspect of it) is not supported (-32004)."""
        return cls(UNSUPPORTED_OPERATION, detail)

    @classmethod
    def content_type_not_supported(cls, media_type: str | None = None) -> A2AError:
        """A media type in the request is not supported (-32005)."""
        metadata = {"mediaType": media_type} if media_type is not None else None
        return cls(CONTENT_TYPE_NOT_SUPPORTED, metadata=metadata)

    @classmethod
    def invalid_agent_response(cls, detail: str | None = None) -> A2AError:
        """An agent's response did not conform to the spec (-32006)."""
        return cls(INVALID_AGENT_RESPONSE, detail)

    @classmethod
    def extended_agent_card_not_configured(cls) -> A2AError:
        """An extended agent card is supported but not configured (-32007)."""
        return cls(EXTENDED_AGENT_CARD_NOT_CONFIGURED)

    @classmethod
    def extension_support_required(cls, uri: str | None = None) -> A2AError:
        """The client did not declare a required extension (-32008)."""
        metadata = {"extension": uri} if uri is not None else None
        return cls(EXTENSION_SUPPORT_REQUIRED, metadata=metadata)

    @classmethod
    def version_not_supported(cls, version: str | None = None) -> A2AError:
        """The requested ``A2A-Version`` is not supported (-32009)."""
        metadata = {"version": version} if version is not None else None
        return cls(VERSION_NOT_SUPPORTED, metadata=metadata)


# --------------------------------------------------------------------------- envelope models


class JSONRPCRequest(BaseModel):
    """A JSON-RPC 2.0 request; without an ``id`` member it is a notification."""

    model_config = ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)

    jsonrpc: Literal["2.0"]
    method: str = Field(min_length=1)
    params: dict[str, Any] | list[Any] | None = None
    id: StrictStr | StrictInt | None = None

    @property
    def is_notification(self) -> bool:
        """True when the request had no ``id`` member (no response is expected)."""
        return "id" not in self.model_fields_set


class JSONRPCError(BaseModel):
    """The ``error`` member of a JSON-RPC error response."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    code: StrictInt
    message: str
    data: Any = None


class JSONRPCSuccessResponse(BaseModel):
    """A JSON-RPC 2.0 success response."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    jsonrpc: Literal["2.0"] = JSONRPC_VERSION
    id: StrictStr | StrictInt | None
    result: Any


class JSONRPCErrorResponse(BaseModel):
    """A JSON-RPC 2.0 error response."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    jsonrpc: Literal["2.0"] = JSONRPC_VERSION
    id: StrictStr | StrictInt | None
    error: JSONRPCError


# --------------------------------------------------------------------------- parse / respond


def _reject_constant(name: str) -> NoReturn:
    # Python's json accepts NaN / Infinity; JSON does not.
    raise ValueError(f"{name} is not valid JSON")


def parse_request(raw: bytes | str) -> JSONRPCRequest:
    """Parse one JSON-RPC request body.

    Raises A2AError: PARSE_ERROR for anything that is not JSON, INVALID_REQUEST
    for JSON that is not a single request object (batches included), with
    ``request_id`` set when the id could be read.
    """
    try:
        obj = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise A2AError.parse_error() from None
    if isinstance(obj, list):
        raise A2AError.invalid_request("Batch requests are not supported")
    if not isinstance(obj, dict):
        raise A2AError.invalid_request("The request must be a JSON object")

    request_id = obj.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
        raise A2AError.invalid_request("id must be a string, an integer or null")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise A2AError.invalid_request('jsonrpc must be "2.0"', request_id=request_id)
    method = obj.get("method")
    if not isinstance(method, str) or not method:
        raise A2AError.invalid_request("method must be a non-empty string", request_id=request_id)
    if not isinstance(obj.get("params"), dict | list | None):
        raise A2AError.invalid_request(
            "params must be an object or an array", request_id=request_id
        )
    try:
        return JSONRPCRequest.model_validate(obj)
    except ValidationError:  # unreachable after the checks above; kept as a guard
        raise A2AError.invalid_request(request_id=request_id) from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, A2AModel):
        return value.to_json_dict()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def success(request_id: str | int | None, result: Any) -> dict[str, Any]:
    """A success response dict; A2A models in ``result`` become their camelCase JSON."""
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": _jsonable(result)}


def failure(request_id: str | int | None, err: A2AError) -> dict[str, Any]:
    """An error response dict carrying ``err.to_error_dict()``."""
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": err.to_error_dict()}
