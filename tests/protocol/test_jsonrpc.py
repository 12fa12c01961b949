"""Behaviour of the JSON-RPC envelope: parsing, error codes, error objects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from a2a_push.errors import A2APushError
from a2a_push.protocol.jsonrpc import (
    BAD_REQUEST_TYPE,
    CONTENT_TYPE_NOT_SUPPORTED,
    ERROR_DOMAIN,
    ERROR_INFO_TYPE,
    ERRORS,
    EXTENDED_AGENT_CARD_NOT_CONFIGURED,
    EXTENSION_SUPPORT_REQUIRED,
    INTERNAL_ERROR,
    INVALID_AGENT_RESPONSE,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PUSH_NOTIFICATION_NOT_SUPPORTED,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    VERSION_NOT_SUPPORTED,
    A2AError,
    JSONRPCErrorResponse,
    JSONRPCRequest,
    JSONRPCSuccessResponse,
    failure,
    parse_request,
    success,
)
from a2a_push.protocol.types import Task, TaskPushNotificationConfig, TaskState, TaskStatus

# --------------------------------------------------------------------------- codes


def test_error_codes_have_the_spec_values() -> None:
    assert (PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR) == (
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
    )
    assert list(range(-32001, -32010, -1)) == [
        TASK_NOT_FOUND,
        TASK_NOT_CANCELABLE,
        PUSH_NOTIFICATION_NOT_SUPPORTED,
        UNSUPPORTED_OPERATION,
        CONTENT_TYPE_NOT_SUPPORTED,
        INVALID_AGENT_RESPONSE,
        EXTENDED_AGENT_CARD_NOT_CONFIGURED,
        EXTENSION_SUPPORT_REQUIRED,
        VERSION_NOT_SUPPORTED,
    ]


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        (PARSE_ERROR, 400, "JSON_PARSE"),
        (INVALID_REQUEST, 400, "INVALID_REQUEST"),
        (METHOD_NOT_FOUND, 404, "METHOD_NOT_FOUND"),
        (INVALID_PARAMS, 400, "INVALID_PARAMS"),
        (INTERNAL_ERROR, 500, "INTERNAL_ERROR"),
        (TASK_NOT_FOUND, 404, "TASK_NOT_FOUND"),
        (TASK_NOT_CANCELABLE, 400, "TASK_NOT_CANCELABLE"),
        (PUSH_NOTIFICATION_NOT_SUPPORTED, 400, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        (UNSUPPORTED_OPERATION, 400, "UNSUPPORTED_OPERATION"),
        (CONTENT_TYPE_NOT_SUPPORTED, 400, "CONTENT_TYPE_NOT_SUPPORTED"),
        (INVALID_AGENT_RESPONSE, 500, "INVALID_AGENT_RESPONSE"),
        (EXTENDED_AGENT_CARD_NOT_CONFIGURED, 400, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        (EXTENSION_SUPPORT_REQUIRED, 400, "EXTENSION_SUPPORT_REQUIRED"),
        (VERSION_NOT_SUPPORTED, 400, "VERSION_NOT_SUPPORTED"),
    ],
)
def test_each_code_maps_to_its_http_status_and_reason(code: int, status: int, reason: str) -> None:
    err = A2AError(code)
    assert err.http_status == status
    assert err.reason == reason
    assert ERRORS[code].code == code


def test_reason_is_the_spec_error_name_in_upper_snake_case_without_error() -> None:
    for kind in ERRORS.values():
        name = kind.name.removesuffix("Error")
        snake = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()
        expected = snake.replace("J_S_O_N", "JSON")
        # The one exception: the reason the official a2a-sdk maps back to InternalError.
        assert kind.reason == ("INTERNAL_ERROR" if expected == "INTERNAL" else expected)


# --------------------------------------------------------------------------- A2AError


def test_a2a_error_is_a_package_error() -> None:
    assert isinstance(A2AError.task_not_found("t1"), A2APushError)


def test_task_not_found_error_dict_carries_error_info() -> None:
    assert A2AError.task_not_found("t1").to_error_dict() == {
        "code": -32001,
        "message": "Task not found",
        "data": [
            {
                "@type": ERROR_INFO_TYPE,
                "reason": "TASK_NOT_FOUND",
                "domain": "a2a-protocol.org",
                "metadata": {"taskId": "t1"},
            }
        ],
    }


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (A2AError.parse_error(), PARSE_ERROR),
        (A2AError.invalid_request(), INVALID_REQUEST),
        (A2AError.method_not_found("x/y"), METHOD_NOT_FOUND),
        (A2AError.invalid_params("bad"), INVALID_PARAMS),
        (A2AError.internal_error(), INTERNAL_ERROR),
        (A2AError.task_not_found("t"), TASK_NOT_FOUND),
        (A2AError.task_not_cancelable("t"), TASK_NOT_CANCELABLE),
        (A2AError.push_notification_not_supported(), PUSH_NOTIFICATION_NOT_SUPPORTED),
        (A2AError.unsupported_operation(), UNSUPPORTED_OPERATION),
        (A2AError.content_type_not_supported("image/x"), CONTENT_TYPE_NOT_SUPPORTED),
        (A2AError.invalid_agent_response(), INVALID_AGENT_RESPONSE),
        (A2AError.extended_agent_card_not_configured(), EXTENDED_AGENT_CARD_NOT_CONFIGURED),
        (A2AError.extension_support_required("urn:x"), EXTENSION_SUPPORT_REQUIRED),
        (A2AError.version_not_supported("9.9"), VERSION_NOT_SUPPORTED),
    ],
)
def test_every_factory_produces_its_code_with_an_error_info_entry(err: A2AError, code: int) -> None:
    data = err.to_error_dict()
    assert data["code"] == code
    assert isinstance(data["message"], str) and data["message"]
    info = data["data"][0]
    assert info["@type"] == ERROR_INFO_TYPE
    assert info["domain"] == ERROR_DOMAIN
    assert info["reason"] == ERRORS[code].reason
    json.dumps(data)  # JSON-ready


def test_invalid_params_with_field_adds_a_bad_request_entry() -> None:
    data = A2AError.invalid_params("url is required", field="url").to_error_dict()
    assert data["message"] == "url is required"
    assert data["data"][0]["metadata"] == {"field": "url"}
    assert data["data"][1] == {
        "@type": BAD_REQUEST_TYPE,
        "fieldViolations": [{"field": "url", "description": "url is required"}],
    }


def test_invalid_params_from_validation_error_names_the_camel_case_field() -> None:
    with pytest.raises(ValidationError) as info:
        TaskPushNotificationConfig.model_validate(
            {"task_id": "t", "url": "https://e.com", "token": "secret\r\n"}
        )
    err = A2AError.from_validation_error(info.value)
    assert err.code == INVALID_PARAMS
    assert err.metadata == {"field": "token"}
    assert err.message.startswith("token: token must not contain CR, LF")
    assert "secret" not in json.dumps(err.to_error_dict())


def test_invalid_params_from_validation_error_with_prefix() -> None:
    with pytest.raises(ValidationError) as info:
        Task.model_validate({"id": "t"})
    err = A2AError.from_validation_error(info.value, prefix="params")
    assert err.metadata == {"field": "params.status"}


def test_metadata_values_are_strings() -> None:
    err = A2AError(TASK_NOT_FOUND, metadata={"n": 3})
    assert err.to_error_dict()["data"][0]["metadata"] == {"n": "3"}


def test_unknown_code_has_no_error_info_and_maps_to_500() -> None:
    err = A2AError(-32050, "custom")
    assert err.http_status == 500
    assert err.reason is None
    assert err.to_error_dict() == {"code": -32050, "message": "custom"}


def test_error_dict_round_trips_through_from_error_dict() -> None:
    err = A2AError.invalid_params("bad", field="url")
    again = A2AError.from_error_dict(err.to_error_dict())
    assert again.to_error_dict() == err.to_error_dict()


def test_from_error_dict_rejects_a_non_error() -> None:
    with pytest.raises(ValueError, match="integer code"):
        A2AError.from_error_dict({"code": True, "message": "x"})


def test_str_of_error_is_its_message() -> None:
    assert str(A2AError.task_not_found("t1")) == "Task not found"


# --------------------------------------------------------------------------- parse_request


def test_valid_request_is_parsed() -> None:
    req = parse_request(
        b'{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"t1"},"extra":1}'
    )
    assert (req.id, req.method, req.params) == (7, "GetTask", {"id": "t1"})
    assert not req.is_notification


def test_request_without_id_is_a_notification() -> None:
    req = parse_request('{"jsonrpc":"2.0","method":"x"}')
    assert req.is_notification
    assert req.id is None
    assert req.params is None


def test_request_with_null_id_is_not_a_notification() -> None:
    assert not parse_request('{"jsonrpc":"2.0","method":"x","id":null}').is_notification


def test_string_id_and_array_params_are_accepted() -> None:
    req = parse_request('{"jsonrpc":"2.0","method":"x","id":"abc","params":[1]}')
    assert (req.id, req.params) == ("abc", [1])


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", PARSE_ERROR),
        (b"", PARSE_ERROR),
        (b"\xff\xfe\x00garbage", PARSE_ERROR),
        (b'{"jsonrpc":"2.0","method":"x","id":NaN}', PARSE_ERROR),
        (b"[" * 100_000 + b"]" * 100_000, PARSE_ERROR),
        (b'[{"jsonrpc":"2.0","method":"x","id":1}]', INVALID_REQUEST),
        (b"[]", INVALID_REQUEST),
        (b"42", INVALID_REQUEST),
        (b'"text"', INVALID_REQUEST),
        (b"null", INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1}', INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1,"method":""}', INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1,"method":5}', INVALID_REQUEST),
        (b'{"jsonrpc":"1.0","id":1,"method":"x"}', INVALID_REQUEST),
        (b'{"jsonrpc":2.0,"id":1,"method":"x"}', INVALID_REQUEST),
        (b'{"id":1,"method":"x"}', INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x"}', INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":{},"method":"x"}', INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1,"method":"x","params":"p"}', INVALID_REQUEST),
    ],
)
def test_bad_requests_map_to_the_right_code(raw: bytes, code: int) -> None:
    with pytest.raises(A2AError) as info:
        parse_request(raw)
    assert info.value.code == code
    assert info.value.http_status == 400


def test_invalid_request_carries_the_request_id_when_readable() -> None:
    with pytest.raises(A2AError) as info:
        parse_request(b'{"jsonrpc":"1.0","id":"r1","method":"x"}')
    assert info.value.request_id == "r1"


def test_invalid_request_with_unreadable_id_has_no_request_id() -> None:
    with pytest.raises(A2AError) as info:
        parse_request(b'{"jsonrpc":"2.0","id":false,"method":"x"}')
    assert info.value.request_id is None


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_request_like = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2.0]) | _json,
        "method": st.text() | _json,
        "id": _json,
        "params": _json,
    },
)


@given(st.one_of(_json, _request_like))
def test_any_json_value_either_parses_or_raises_a2a_error(value: Any) -> None:
    try:
        req = parse_request(json.dumps(value).encode())
    except A2AError as err:
        assert err.code in (PARSE_ERROR, INVALID_REQUEST)
    else:
        assert req.jsonrpc == "2.0"
        assert isinstance(req.method, str) and req.method


@given(st.binary())
def test_any_bytes_either_parse_or_raise_a2a_error(raw: bytes) -> None:
    try:
        parse_request(raw)
    except A2AError as err:
        assert err.code in (PARSE_ERROR, INVALID_REQUEST)


# --------------------------------------------------------------------------- responses


def test_success_response_serialises_models_as_camel_case() -> None:
    task = Task(id="t1", context_id="c1", status=TaskStatus(state=TaskState.WORKING))
    body = success(1, task)
    assert body == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}},
    }
    assert JSONRPCSuccessResponse.model_validate(body).result == body["result"]


def test_success_response_serialises_lists_of_models() -> None:
    config = TaskPushNotificationConfig(task_id="t1", url="https://e.com/h")
    assert success("a", [config])["result"] == [{"taskId": "t1", "url": "https://e.com/h"}]


def test_failure_response_carries_the_error_dict_and_null_id() -> None:
    err = A2AError.parse_error()
    body = failure(None, err)
    assert body == {"jsonrpc": "2.0", "id": None, "error": err.to_error_dict()}
    assert json.loads(json.dumps(body))["id"] is None
    parsed = JSONRPCErrorResponse.model_validate(body)
    assert parsed.error.code == PARSE_ERROR


def test_request_model_rejects_bool_id() -> None:
    with pytest.raises(ValidationError):
        JSONRPCRequest.model_validate({"jsonrpc": "2.0", "method": "x", "id": True})
