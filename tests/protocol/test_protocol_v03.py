"""Behaviour of the v0.3 <-> v1.0 conversions."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pydantic import ValidationError

from a2a_push.errors import InvalidConfigError
from a2a_push.protocol.types import (
    Artifact,
    AuthenticationInfo,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a_push.protocol.v03 import (
    V03FormatError,
    artifact_update_from_v03,
    artifact_update_to_v03,
    config_from_v03,
    config_to_v03,
    message_from_v03,
    message_to_v03,
    part_from_v03,
    part_to_v03,
    push_config_from_v03,
    push_config_to_v03,
    status_update_from_v03,
    status_update_to_v03,
    stream_response_from_v03,
    stream_response_to_v03,
    task_from_v03,
    task_to_v03,
)

V03_CONFIG: dict[str, Any] = {
    "taskId": "t1",
    "pushNotificationConfig": {
        "id": "cfg1",
        "url": "https://example.com/hook",
        "token": "tok",
        "authentication": {"schemes": ["Bearer"], "credentials": "secret"},
    },
}

KEBAB = {
    TaskState.SUBMITTED: "submitted",
    TaskState.WORKING: "working",
    TaskState.INPUT_REQUIRED: "input-required",
    TaskState.AUTH_REQUIRED: "auth-required",
    TaskState.COMPLETED: "completed",
    TaskState.FAILED: "failed",
    TaskState.CANCELED: "canceled",
    TaskState.REJECTED: "rejected",
}


def _full_task(state: TaskState = TaskState.COMPLETED) -> Task:
    agent_message = Message(
        message_id="m2",
        context_id="c1",
        task_id="t1",
        role=Role.AGENT,
        parts=[Part(text="done")],
    )
    return Task(
        id="t1",
        context_id="c1",
        status=TaskStatus(state=state, message=agent_message, timestamp="2025-10-28T10:30:00Z"),
        history=[
            Message(
                message_id="m1",
                context_id="c1",
                role=Role.USER,
                parts=[
                    Part(text="please", metadata={"lang": "en"}),
                    Part(raw="aGVsbG8=", media_type="text/plain", filename="hello.txt"),
                ],
                reference_task_ids=["t0"],
                extensions=["urn:ext"],
                metadata={"k": "v"},
            ),
            agent_message,
        ],
        artifacts=[
            Artifact(
                artifact_id="a1",
                name="report",
                description="the report",
                parts=[
                    Part(url="https://example.com/r.pdf", media_type="application/pdf"),
                    Part(data={"score": 0.9, "tags": ["x"]}),
                ],
                metadata={"size": 3},
                extensions=["urn:ext"],
            )
        ],
        metadata={"origin": "test"},
    )


# --------------------------------------------------------------------------- configs


def test_v03_config_becomes_the_flat_v1_config() -> None:
    config = config_from_v03(V03_CONFIG)
    assert config == TaskPushNotificationConfig(
        id="cfg1",
        task_id="t1",
        url="https://example.com/hook",
        token="tok",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="secret"),
    )


def test_v03_config_round_trips() -> None:
    assert config_to_v03(config_from_v03(V03_CONFIG)) == V03_CONFIG


def test_minimal_v03_config_round_trips() -> None:
    data = {"taskId": "t1", "pushNotificationConfig": {"url": "https://example.com/hook"}}
    assert config_to_v03(config_from_v03(data)) == data


def test_v03_config_accepts_snake_case_keys() -> None:
    config = config_from_v03(
        {"task_id": "t1", "push_notification_config": {"url": "https://example.com/hook"}}
    )
    assert config.task_id == "t1"


def test_first_of_several_v03_schemes_becomes_the_scheme() -> None:
    data = {
        "url": "https://example.com/hook",
        "authentication": {"schemes": ["Basic", "Bearer"], "credentials": "x"},
    }
    auth = push_config_from_v03(data, "t1").authentication
    assert auth == AuthenticationInfo(scheme="Basic", credentials="x")


def test_empty_v03_schemes_list_is_rejected() -> None:
    data = {"url": "https://example.com/hook", "authentication": {"schemes": []}}
    with pytest.raises(InvalidConfigError) as info:
        config_from_v03({"taskId": "t1", "pushNotificationConfig": data})
    assert info.value.field == "pushNotificationConfig.authentication.schemes"


def test_missing_v03_schemes_is_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="schemes"):
        push_config_from_v03(
            {"url": "https://example.com/hook", "authentication": {"credentials": "x"}}
        )


def test_v03_config_without_inner_config_is_rejected() -> None:
    with pytest.raises(InvalidConfigError) as info:
        config_from_v03({"taskId": "t1"})
    assert info.value.field == "pushNotificationConfig"


def test_v03_config_without_url_is_rejected_naming_it() -> None:
    with pytest.raises(InvalidConfigError) as info:
        config_from_v03({"taskId": "t1", "pushNotificationConfig": {"token": "x"}})
    assert info.value.field == "pushNotificationConfig.url"


@pytest.mark.parametrize(
    ("inner", "field"),
    [
        ({"url": "https://e.com/h", "token": "a\r\nb"}, "pushNotificationConfig.token"),
        (
            {"url": "https://e.com/h", "authentication": {"schemes": ["Bearer\n"]}},
            "pushNotificationConfig.authentication.schemes",
        ),
        (
            {
                "url": "https://e.com/h",
                "authentication": {"schemes": ["Bearer"], "credentials": "x\ny"},
            },
            "pushNotificationConfig.authentication.credentials",
        ),
    ],
)
def test_v03_config_with_crlf_is_rejected_naming_the_v03_field(
    inner: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidConfigError) as info:
        config_from_v03({"taskId": "t1", "pushNotificationConfig": inner})
    assert info.value.field == field


def test_bare_v03_push_config_takes_the_task_id_argument() -> None:
    config = push_config_from_v03({"id": "c", "url": "https://example.com/hook"}, "t9")
    assert (config.task_id, config.id) == ("t9", "c")
    assert push_config_to_v03(config) == {"id": "c", "url": "https://example.com/hook"}


def test_config_to_v03_drops_tenant_and_keeps_auth_shape() -> None:
    config = TaskPushNotificationConfig(
        tenant="acme",
        task_id="t1",
        url="https://example.com/hook",
        authentication=AuthenticationInfo(scheme="Basic"),
    )
    assert config_to_v03(config) == {
        "taskId": "t1",
        "pushNotificationConfig": {
            "url": "https://example.com/hook",
            "authentication": {"schemes": ["Basic"]},
        },
    }


# --------------------------------------------------------------------------- parts


def test_parts_are_written_in_v03_shapes() -> None:
    assert part_to_v03(Part(text="hi")) == {"kind": "text", "text": "hi"}
    assert part_to_v03(Part(raw="AA==", media_type="a/b", filename="f")) == {
        "kind": "file",
        "file": {"bytes": "AA==", "mimeType": "a/b", "name": "f"},
    }
    assert part_to_v03(Part(url="https://e.com/f")) == {
        "kind": "file",
        "file": {"uri": "https://e.com/f"},
    }
    assert part_to_v03(Part(data={"a": 1}, metadata={"m": 1})) == {
        "kind": "data",
        "data": {"a": 1},
        "metadata": {"m": 1},
    }


def test_non_object_data_is_wrapped_for_v03_and_marked_as_the_sdks_do() -> None:
    assert part_to_v03(Part(data=[1, 2])) == {
        "kind": "data",
        "data": {"value": [1, 2]},
        "metadata": {"data_part_compat": True},
    }
    assert part_to_v03(Part(data="s", metadata={"m": 1})) == {
        "kind": "data",
        "data": {"value": "s"},
        "metadata": {"m": 1, "data_part_compat": True},
    }


@pytest.mark.parametrize("value", [[1, 2], "s", 3, True, None])
def test_wrapped_v03_data_reads_back_as_the_value(value: object) -> None:
    part = Part.model_validate({"data": value})
    back = part_from_v03(part_to_v03(part))
    assert back.data == value and back.metadata is None
    assert back.to_json_dict() == {"data": value}


def test_a_data_part_holding_null_is_a_data_part() -> None:
    # google.protobuf.Value: null is a value (the official SDK sends {"data": null}).
    part = Part.model_validate_json(b'{"data": null}')
    assert part.has_null_data and part.to_json_bytes() == b'{"data":null}'
    with pytest.raises(ValidationError, match="got text, data"):
        Part.model_validate_json(b'{"text": "x", "data": null}')
    assert not Part(text="x").has_null_data


@pytest.mark.parametrize("raw", ["aGk", "-_8=", "-_8", "aGk="])
def test_v03_file_bytes_are_standard_padded_base64(raw: str) -> None:
    written = part_to_v03(Part(raw=raw))["file"]["bytes"]
    assert base64.b64decode(written, validate=True) == Part(raw=raw).raw_bytes()


@pytest.mark.parametrize(
    "part",
    [
        Part(text="hi", metadata={"x": 1}),
        Part(raw="aGVsbG8=", media_type="text/plain", filename="h.txt"),
        Part(url="https://e.com/f.pdf", media_type="application/pdf", filename="f.pdf"),
        Part(data={"nested": {"a": [1, None]}}),
    ],
)
def test_parts_round_trip(part: Part) -> None:
    assert part_from_v03(part_to_v03(part)) == part


def test_v03_file_part_with_both_bytes_and_uri_is_rejected() -> None:
    with pytest.raises(V03FormatError, match="exactly one of bytes, uri"):
        part_from_v03({"kind": "file", "file": {"bytes": "AA==", "uri": "https://e.com"}})


def test_v03_part_with_unknown_kind_is_rejected() -> None:
    with pytest.raises(V03FormatError, match="unknown kind"):
        part_from_v03({"kind": "video", "video": "x"})


def test_v03_part_without_kind_is_inferred() -> None:
    assert part_from_v03({"text": "hi"}) == Part(text="hi")


# --------------------------------------------------------------------------- tasks & messages


def test_task_is_written_in_the_v03_shape() -> None:
    data = task_to_v03(_full_task(TaskState.INPUT_REQUIRED))
    assert data["kind"] == "task"
    assert data["contextId"] == "c1"
    assert data["status"]["state"] == "input-required"
    assert data["status"]["message"]["kind"] == "message"
    assert data["status"]["message"]["role"] == "agent"
    user = data["history"][0]
    assert user["role"] == "user"
    assert user["referenceTaskIds"] == ["t0"]
    assert user["parts"][0] == {"kind": "text", "text": "please", "metadata": {"lang": "en"}}
    assert user["parts"][1]["file"] == {
        "bytes": "aGVsbG8=",
        "mimeType": "text/plain",
        "name": "hello.txt",
    }
    artifact = data["artifacts"][0]
    assert artifact["artifactId"] == "a1"
    assert artifact["parts"][1] == {"kind": "data", "data": {"score": 0.9, "tags": ["x"]}}


@pytest.mark.parametrize("state", list(TaskState))
def test_task_round_trips_in_every_state(state: TaskState) -> None:
    task = _full_task(state)
    data = task_to_v03(task)
    assert data["status"]["state"] == KEBAB[state]
    assert task_from_v03(data) == task


def test_minimal_task_round_trips() -> None:
    task = Task(id="t1", context_id="c1", status=TaskStatus(state=TaskState.SUBMITTED))
    assert task_to_v03(task) == {
        "kind": "task",
        "id": "t1",
        "contextId": "c1",
        "status": {"state": "submitted"},
    }
    assert task_from_v03(task_to_v03(task)) == task


def test_task_without_context_id_gets_an_empty_v03_context_id() -> None:
    task = Task(id="t1", status=TaskStatus(state=TaskState.WORKING))
    assert task_to_v03(task)["contextId"] == ""
    assert task_from_v03(task_to_v03(task)) == task


def test_v03_task_with_unknown_state_is_rejected() -> None:
    with pytest.raises(V03FormatError, match="state"):
        task_from_v03(
            {"kind": "task", "id": "t1", "contextId": "c", "status": {"state": "unknown"}}
        )


def test_v03_task_without_status_is_rejected() -> None:
    with pytest.raises(V03FormatError, match="status"):
        task_from_v03({"kind": "task", "id": "t1", "contextId": "c"})


def test_v03_task_with_non_list_history_is_rejected() -> None:
    with pytest.raises(V03FormatError, match="history"):
        task_from_v03({"id": "t1", "contextId": "c", "status": {"state": "working"}, "history": {}})


def test_message_round_trips() -> None:
    message = Message(
        message_id="m1",
        task_id="t1",
        context_id="c1",
        role=Role.USER,
        parts=[Part(text="a"), Part(url="https://e.com/x")],
        metadata={"k": 1},
    )
    data = message_to_v03(message)
    assert data["kind"] == "message"
    assert data["role"] == "user"
    assert message_from_v03(data) == message


# --------------------------------------------------------------------------- events


@pytest.mark.parametrize("state", list(TaskState))
def test_status_update_round_trips_with_final_for_terminal_states(state: TaskState) -> None:
    event = TaskStatusUpdateEvent(
        task_id="t1",
        context_id="c1",
        status=TaskStatus(state=state, timestamp="2025-10-28T10:30:00.000Z"),
        metadata={"seq": 3},
    )
    data = status_update_to_v03(event)
    assert data["kind"] == "status-update"
    assert data["status"]["state"] == KEBAB[state]
    assert data["final"] is state.is_terminal
    assert status_update_from_v03(data) == event


def test_status_update_final_can_be_overridden() -> None:
    event = TaskStatusUpdateEvent(
        task_id="t1", context_id="c1", status=TaskStatus(state=TaskState.INPUT_REQUIRED)
    )
    assert status_update_to_v03(event, final=True)["final"] is True


def test_artifact_update_round_trips() -> None:
    event = TaskArtifactUpdateEvent(
        task_id="t1",
        context_id="c1",
        artifact=Artifact(artifact_id="a1", parts=[Part(text="chunk")]),
        append=True,
        last_chunk=False,
        metadata={"m": 1},
    )
    data = artifact_update_to_v03(event)
    assert data == {
        "kind": "artifact-update",
        "taskId": "t1",
        "contextId": "c1",
        "artifact": {"artifactId": "a1", "parts": [{"kind": "text", "text": "chunk"}]},
        "append": True,
        "lastChunk": False,
        "metadata": {"m": 1},
    }
    assert artifact_update_from_v03(data) == event


@pytest.mark.parametrize(
    "event",
    [
        _full_task(),
        Message(message_id="m", role=Role.AGENT, parts=[Part(text="x")]),
        TaskStatusUpdateEvent(
            task_id="t1", context_id="c1", status=TaskStatus(state=TaskState.WORKING)
        ),
        TaskArtifactUpdateEvent(
            task_id="t1",
            context_id="c1",
            artifact=Artifact(artifact_id="a", parts=[Part(data={"x": 1})]),
        ),
    ],
)
def test_stream_response_round_trips_by_kind(event: Any) -> None:
    response = StreamResponse.wrap(event)
    assert stream_response_from_v03(stream_response_to_v03(response)) == response


def test_stream_response_from_v03_rejects_missing_kind() -> None:
    with pytest.raises(V03FormatError, match="kind is required"):
        stream_response_from_v03({"id": "t1"})


def test_stream_response_from_v03_rejects_unknown_kind() -> None:
    with pytest.raises(V03FormatError, match="kind must be one of"):
        stream_response_from_v03({"kind": "nope"})


def test_stream_response_from_v03_rejects_non_object() -> None:
    with pytest.raises(V03FormatError):
        stream_response_from_v03([1, 2])


def test_v03_format_error_is_a_value_error() -> None:
    assert issubclass(V03FormatError, ValueError)
