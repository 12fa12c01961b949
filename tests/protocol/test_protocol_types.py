"""Behaviour of the A2A v1.0 protocol models."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from a2a_push.protocol.types import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
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
    utc_timestamp,
)


def _message(**overrides: object) -> Message:
    fields: dict[str, object] = {
        "message_id": "m1",
        "role": Role.AGENT,
        "parts": [Part(text="hi")],
    }
    fields.update(overrides)
    return Message.model_validate(fields)


def _task() -> Task:
    return Task(
        id="t1",
        context_id="c1",
        status=TaskStatus(state=TaskState.WORKING, timestamp="2025-10-28T10:30:00.000Z"),
    )


def _status_update(state: TaskState = TaskState.COMPLETED) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(task_id="t1", context_id="c1", status=TaskStatus(state=state))


def _artifact_update() -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id="t1",
        context_id="c1",
        artifact=Artifact(artifact_id="a1", parts=[Part(data={"k": 1})]),
        last_chunk=True,
    )


# --------------------------------------------------------------------------- JSON shape


def test_json_out_is_camel_case_without_unset_fields() -> None:
    event = TaskArtifactUpdateEvent(
        task_id="t1",
        context_id="c1",
        artifact=Artifact(artifact_id="a1", parts=[Part(url="https://x/y", media_type="a/b")]),
        last_chunk=True,
    )
    assert event.to_json_dict() == {
        "taskId": "t1",
        "contextId": "c1",
        "artifact": {"artifactId": "a1", "parts": [{"url": "https://x/y", "mediaType": "a/b"}]},
        "lastChunk": True,
    }


def test_to_json_bytes_is_compact_json_of_to_json_dict() -> None:
    task = _task()
    raw = task.to_json_bytes()
    assert b" " not in raw
    assert json.loads(raw) == task.to_json_dict()


def test_enum_values_are_written_as_proto_names() -> None:
    data = _message().to_json_dict()
    assert data["role"] == "ROLE_AGENT"
    assert _task().to_json_dict()["status"]["state"] == "TASK_STATE_WORKING"


def test_camel_case_keys_are_accepted() -> None:
    event = TaskStatusUpdateEvent.model_validate(
        {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}
    )
    assert (event.task_id, event.context_id) == ("t1", "c1")


def test_snake_case_keys_are_accepted() -> None:
    event = TaskStatusUpdateEvent.model_validate(
        {"task_id": "t1", "context_id": "c1", "status": {"state": "TASK_STATE_WORKING"}}
    )
    assert (event.task_id, event.context_id) == ("t1", "c1")


def test_snake_case_keys_are_accepted_in_nested_json() -> None:
    raw = json.dumps(
        {
            "artifact_update": {
                "task_id": "t1",
                "context_id": "c1",
                "artifact": {"artifact_id": "a1", "parts": [{"text": "x", "media_type": "t/p"}]},
                "last_chunk": True,
            }
        }
    )
    response = StreamResponse.model_validate_json(raw)
    assert response.artifact_update is not None
    assert response.artifact_update.last_chunk is True
    assert response.artifact_update.artifact.parts[0].media_type == "t/p"


def test_unknown_fields_are_ignored() -> None:
    task = Task.model_validate(
        {
            "id": "t1",
            "kind": "task",
            "futureField": {"x": 1},
            "status": {"state": "TASK_STATE_SUBMITTED", "extra": True},
        }
    )
    assert "futureField" not in task.to_json_dict()
    assert task.to_json_dict() == {"id": "t1", "status": {"state": "TASK_STATE_SUBMITTED"}}


def test_round_trip_through_json_is_lossless() -> None:
    task = Task(
        id="t1",
        context_id="c1",
        status=TaskStatus(state=TaskState.INPUT_REQUIRED, message=_message()),
        artifacts=[Artifact(artifact_id="a1", parts=[Part(data=[1, "two", None])])],
        history=[_message(role=Role.USER, reference_task_ids=["t0"], extensions=["urn:x"])],
        metadata={"nested": {"null": None, "list": [1.5, True]}},
    )
    assert Task.model_validate_json(task.to_json_bytes()) == task


def test_none_values_inside_metadata_are_kept() -> None:
    task = Task(id="t1", status=TaskStatus(state="working"), metadata={"k": None})
    assert task.to_json_dict()["metadata"] == {"k": None}


# --------------------------------------------------------------------------- required fields


@pytest.mark.parametrize(
    ("model", "data", "missing"),
    [
        (Task, {"status": {"state": "TASK_STATE_WORKING"}}, "id"),
        (Task, {"id": "t1"}, "status"),
        (TaskStatus, {}, "state"),
        (Message, {"role": "ROLE_USER", "parts": [{"text": "x"}]}, "messageId"),
        (Message, {"messageId": "m", "parts": [{"text": "x"}]}, "role"),
        (Message, {"messageId": "m", "role": "ROLE_USER"}, "parts"),
        (Artifact, {"parts": [{"text": "x"}]}, "artifactId"),
        (
            TaskStatusUpdateEvent,
            {"contextId": "c", "status": {"state": "TASK_STATE_WORKING"}},
            "taskId",
        ),
        (
            TaskStatusUpdateEvent,
            {"taskId": "t", "status": {"state": "TASK_STATE_WORKING"}},
            "contextId",
        ),
        (TaskArtifactUpdateEvent, {"taskId": "t", "contextId": "c"}, "artifact"),
        (TaskPushNotificationConfig, {"taskId": "t"}, "url"),
        (AuthenticationInfo, {"credentials": "x"}, "scheme"),
    ],
)
def test_missing_required_field_is_rejected_naming_it(
    model: type[Task], data: dict[str, object], missing: str
) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    assert missing in str(info.value)
    assert any(err["loc"] == (missing,) for err in info.value.errors())


def test_empty_parts_list_is_rejected() -> None:
    with pytest.raises(ValidationError, match="parts"):
        Message.model_validate({"messageId": "m", "role": "ROLE_USER", "parts": []})
    with pytest.raises(ValidationError, match="parts"):
        Artifact.model_validate({"artifactId": "a", "parts": []})


def test_empty_task_id_is_rejected() -> None:
    with pytest.raises(ValidationError, match="id"):
        Task.model_validate({"id": "", "status": {"state": "TASK_STATE_WORKING"}})


def test_task_context_id_is_optional_as_in_the_proto() -> None:
    task = Task.model_validate({"id": "t1", "status": {"state": "TASK_STATE_WORKING"}})
    assert task.context_id is None


def test_wrong_type_is_rejected() -> None:
    with pytest.raises(ValidationError, match="taskId"):
        TaskStatusUpdateEvent.model_validate(
            {"taskId": 5, "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}
        )


def test_assignment_is_validated() -> None:
    config = TaskPushNotificationConfig(url="https://example.com/hook")
    with pytest.raises(ValidationError, match="token"):
        config.token = "a\r\nb"


# --------------------------------------------------------------------------- Part


@pytest.mark.parametrize(
    "data",
    [
        {"text": "hello"},
        {"text": ""},
        {"raw": "aGVsbG8="},
        {"url": "https://example.com/f.pdf", "filename": "f.pdf", "mediaType": "application/pdf"},
        {"data": {"k": [1, 2]}},
        {"data": [1, 2]},
        {"data": "s"},
        {"data": 0},
        {"data": False},
    ],
)
def test_part_with_exactly_one_content_field_is_accepted(data: dict[str, object]) -> None:
    assert Part.model_validate(data).to_json_dict() == data


def test_part_with_no_content_is_rejected() -> None:
    with pytest.raises(ValidationError, match="exactly one of text, raw, url, data; got none"):
        Part.model_validate({"mediaType": "text/plain"})


def test_part_with_two_contents_is_rejected_naming_them() -> None:
    with pytest.raises(ValidationError, match="got text, url"):
        Part.model_validate({"text": "x", "url": "https://example.com"})


def test_part_raw_must_be_base64() -> None:
    with pytest.raises(ValidationError, match="raw must be base64"):
        Part(raw="not base64!")


def test_part_from_bytes_round_trips() -> None:
    payload = bytes(range(256))
    part = Part.from_bytes(payload, media_type="application/octet-stream", filename="b.bin")
    assert part.raw_bytes() == payload
    assert Part.model_validate_json(part.to_json_bytes()).raw_bytes() == payload


def test_part_raw_accepts_url_safe_unpadded_base64() -> None:
    assert Part(raw="-_8").raw_bytes() == b"\xfb\xff"


def test_raw_bytes_is_none_for_other_parts() -> None:
    assert Part(text="x").raw_bytes() is None


# --------------------------------------------------------------------------- TaskState / Role


def test_there_are_eight_states_split_into_terminal_interrupted_and_active() -> None:
    assert len(TaskState) == 8
    assert {
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.CANCELED,
        TaskState.REJECTED,
    } == TERMINAL_STATES
    assert {TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED} == INTERRUPTED_STATES
    assert not TERMINAL_STATES & INTERRUPTED_STATES


@pytest.mark.parametrize("state", list(TaskState))
def test_state_helpers_agree_with_the_state_sets(state: TaskState) -> None:
    assert state.is_terminal == (state in TERMINAL_STATES)
    assert state.is_interrupted == (state in INTERRUPTED_STATES)
    assert state.value == f"TASK_STATE_{state.name}"


def test_active_states_are_neither_terminal_nor_interrupted() -> None:
    for state in (TaskState.SUBMITTED, TaskState.WORKING):
        assert not state.is_terminal
        assert not state.is_interrupted


@pytest.mark.parametrize(
    ("v03", "state"),
    [
        ("submitted", TaskState.SUBMITTED),
        ("working", TaskState.WORKING),
        ("input-required", TaskState.INPUT_REQUIRED),
        ("auth-required", TaskState.AUTH_REQUIRED),
        ("completed", TaskState.COMPLETED),
        ("failed", TaskState.FAILED),
        ("canceled", TaskState.CANCELED),
        ("rejected", TaskState.REJECTED),
    ],
)
def test_v03_state_values_are_accepted_on_input(v03: str, state: TaskState) -> None:
    assert TaskStatus.model_validate({"state": v03}).state is state
    assert TaskState(v03) is state


@pytest.mark.parametrize("value", ["TASK_STATE_UNSPECIFIED", "unknown", "WORKING", "", 2])
def test_unspecified_and_unknown_states_are_rejected(value: object) -> None:
    with pytest.raises(ValidationError, match="state"):
        TaskStatus.model_validate({"state": value})


def test_roles_accept_v03_values() -> None:
    assert Role("user") is Role.USER
    assert Role("agent") is Role.AGENT
    assert _message(role="user").role is Role.USER
    with pytest.raises(ValidationError, match="role"):
        _message(role="ROLE_UNSPECIFIED")


# --------------------------------------------------------------------------- TaskStatus


@pytest.mark.parametrize("value", ["yesterday", "2025-13-45T10:30:00Z", "2025-10-28T25:00:00Z"])
def test_timestamp_must_be_iso_8601(value: str) -> None:
    with pytest.raises(ValidationError, match="timestamp"):
        TaskStatus(state=TaskState.WORKING, timestamp=value)


def test_timestamp_with_nanoseconds_is_accepted() -> None:
    status = TaskStatus(state=TaskState.WORKING, timestamp="2025-10-28T10:30:00.123456789Z")
    assert status.timestamp == "2025-10-28T10:30:00.123456789Z"


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        # What ProtoJSON parsers (the official SDKs) refuse is sent in RFC 3339 UTC.
        ("2025-10-28T10:30:00+05:00", "2025-10-28T05:30:00.000Z"),
        ("2025-10-28T10:30:00", "2025-10-28T10:30:00.000Z"),  # no zone: read as UTC
        ("2025-10-28 10:30", "2025-10-28T10:30:00.000Z"),
        ("2025-10-28", "2025-10-28T00:00:00.000Z"),
        ("2025-10-28T10:30:00.123456-01:00", "2025-10-28T11:30:00.123456Z"),
        # Already RFC 3339 UTC: kept as given.
        ("2025-10-28T10:30:00Z", "2025-10-28T10:30:00Z"),
        ("2025-10-28T10:30:00.5Z", "2025-10-28T10:30:00.5Z"),
    ],
)
def test_timestamps_are_sent_in_rfc_3339_utc(given: str, sent: str) -> None:
    assert TaskStatus(state=TaskState.WORKING, timestamp=given).timestamp == sent


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        {"x": float("-inf")},
        {"when": datetime(2025, 1, 1)},
        {1, 2},
        b"\xff",
        {1: "a"},
    ],
)
def test_data_and_metadata_must_be_json_values(value: object) -> None:
    # NaN went out as NaN in v0.3 bodies (not JSON) and as null in v1.0; the others
    # could not be rendered at all, for one protocol version or both.
    with pytest.raises(ValidationError):
        Part(data=value)
    with pytest.raises(ValidationError):
        Part(text="x", metadata={"k": value})
    with pytest.raises(ValidationError):
        TaskStatusUpdateEvent(
            task_id="t",
            context_id="c",
            status=TaskStatus(state=TaskState.WORKING),
            metadata={"k": value},
        )


@pytest.mark.parametrize("field", ["text", "filename", "mediaType"])
def test_content_text_must_be_encodable(field: str) -> None:
    body: dict[str, object] = {"text": "x", field: "a\ud800b"}
    with pytest.raises(ValidationError, match="no lone surrogate"):
        Part.model_validate(body)
    assert Part(text="NUL \x00 is fine in content").text is not None
    with pytest.raises(ValidationError, match="no lone surrogate"):
        Artifact(artifact_id="a", name="\udfff", parts=[Part(text="x")])


def test_utc_timestamp_has_milliseconds_and_z() -> None:
    when = datetime(2025, 10, 28, 10, 30, 0, 123456, tzinfo=UTC)
    assert utc_timestamp(when) == "2025-10-28T10:30:00.123Z"
    assert utc_timestamp().endswith("Z")


# --------------------------------------------------------------------------- StreamResponse


@pytest.mark.parametrize(
    ("event", "key"),
    [
        (_task(), "task"),
        (_message(task_id="t1"), "message"),
        (_status_update(), "statusUpdate"),
        (_artifact_update(), "artifactUpdate"),
    ],
)
def test_stream_response_wraps_each_event_kind(event: object, key: str) -> None:
    response = StreamResponse.wrap(event)  # type: ignore[arg-type]
    assert response.event is event
    assert list(response.to_json_dict()) == [key]
    assert response.task_id == "t1"
    assert StreamResponse.model_validate_json(response.to_json_bytes()) == response


def test_stream_response_task_id_of_message_without_task_is_none() -> None:
    assert StreamResponse.wrap(_message()).task_id is None


def test_stream_response_with_no_payload_is_rejected() -> None:
    with pytest.raises(ValidationError, match="exactly one of task, message, statusUpdate"):
        StreamResponse.model_validate({})


def test_stream_response_with_two_payloads_is_rejected_naming_them() -> None:
    data = {
        "task": _task().to_json_dict(),
        "statusUpdate": _status_update().to_json_dict(),
    }
    with pytest.raises(ValidationError, match="got task, statusUpdate"):
        StreamResponse.model_validate(data)


def test_stream_response_wrap_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        StreamResponse.wrap(Part(text="x"))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- push config


def test_push_config_parses_the_v1_flat_shape() -> None:
    config = TaskPushNotificationConfig.model_validate(
        {
            "tenant": "acme",
            "id": "cfg1",
            "taskId": "t1",
            "url": "https://example.com/hook",
            "token": "tok",
            "authentication": {"scheme": "Bearer", "credentials": "secret"},
        }
    )
    assert config.task_id == "t1"
    assert config.authentication == AuthenticationInfo(scheme="Bearer", credentials="secret")
    assert config.to_json_dict()["authentication"] == {"scheme": "Bearer", "credentials": "secret"}


def test_push_config_requires_a_non_empty_url() -> None:
    with pytest.raises(ValidationError, match="url"):
        TaskPushNotificationConfig(url="")


def test_push_config_empty_optional_strings_read_as_unset() -> None:
    config = TaskPushNotificationConfig.model_validate(
        {"url": "https://example.com/hook", "id": "", "taskId": "", "token": ""}
    )
    assert (config.id, config.task_id, config.token) == (None, None, None)
    assert config.to_json_dict() == {"url": "https://example.com/hook"}


@pytest.mark.parametrize("bad", ["a\rb", "a\nb", "a\r\nX-Evil: 1", "a\x00b", "a\x7fb", "a\x85b"])
@pytest.mark.parametrize(
    ("path", "make"),
    [
        ("token", lambda v: {"url": "https://example.com/h", "token": v}),
        ("url", lambda v: {"url": "https://example.com/h" + v}),
        (
            "authentication.credentials",
            lambda v: {
                "url": "https://example.com/h",
                "authentication": {"scheme": "Bearer", "credentials": v},
            },
        ),
        (
            "authentication.scheme",
            lambda v: {"url": "https://example.com/h", "authentication": {"scheme": v}},
        ),
    ],
)
def test_control_characters_in_header_fields_are_rejected_naming_the_field(
    bad: str, path: str, make: object
) -> None:
    with pytest.raises(ValidationError) as info:
        TaskPushNotificationConfig.model_validate(make(bad))  # type: ignore[operator]
    errors = info.value.errors()
    assert [".".join(str(p) for p in e["loc"]) for e in errors] == [path]
    assert path.rsplit(".", 1)[-1] in errors[0]["msg"]


def test_rejected_secret_is_not_echoed_in_the_error() -> None:
    with pytest.raises(ValidationError) as info:
        TaskPushNotificationConfig(url="https://example.com/h", token="s3cr3t\r\n")
    assert "s3cr3t" not in str(info.value)


def test_scheme_must_be_an_http_token() -> None:
    with pytest.raises(ValidationError, match="scheme"):
        AuthenticationInfo(scheme="Bearer token")
    with pytest.raises(ValidationError, match="scheme"):
        AuthenticationInfo(scheme="")
    assert AuthenticationInfo(scheme="bearer").scheme == "bearer"


def test_a_configs_secrets_are_left_out_of_its_repr() -> None:
    # Error trackers and test failures print models: the token and credentials stay out.
    config = TaskPushNotificationConfig.model_validate(
        {
            "taskId": "t",
            "url": "https://h.example/hook",
            "token": "TOKEN-SECRET",
            "authentication": {"scheme": "Bearer", "credentials": "CREDENTIALS-SECRET"},
        }
    )
    for shown in (repr(config), str(config)):
        assert "SECRET" not in shown and "h.example" in shown
    assert config.token == "TOKEN-SECRET"  # still there to be used
