"""The gateway's request bodies and answers, as pydantic models.

Every model refuses keys it does not define (``extra="forbid"``) and values of another
type (strict: ``"5"`` is no number, ``true`` no time), so a misspelt or misplaced key is
a 400 naming it, never a request that quietly does something else (a replay of every
dead letter because its filter was dropped). :func:`parse_body` reads a body into one,
with a message naming the key. The answers (:class:`Answer` subclasses) are what the
handlers serialize; both describe the API in its OpenAPI document (``/openapi.json``).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from a2a_push.protocol.types import id_problem
from a2a_push.store import ATTEMPT_ERROR_CLASSES, Attempt

_UNIX_TIME: Final = "Unix seconds, e.g. 1767225600"

UnixTime = Annotated[float, Field(allow_inf_nan=False, description=_UNIX_TIME)]


class AdminBody(BaseModel):
    """A request body of the admin API: unknown keys and loose types are refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ReplayRequest(AdminBody):
    """``POST /admin/deliveries/replay``: dead letters to send again, by id or by the
    window they were created in (``since`` inclusive, ``until`` exclusive), optionally
    narrowed to one task."""

    ids: list[str] | None = Field(default=None, description="delivery ids (msg_...)")
    since: UnixTime | None = None
    until: UnixTime | None = None
    task: str | None = Field(default=None, description="only this task's dead letters")

    @field_validator("ids")
    @classmethod
    def _ids(cls, value: list[str] | None) -> list[str] | None:
        for i, item in enumerate(value or ()):
            problem = id_problem(item)
            if problem is not None:
                raise ValueError(f"item {i} {problem}")
        return value

    @field_validator("task")
    @classmethod
    def _task(cls, value: str | None) -> str | None:
        problem = None if value is None else id_problem(value)
        if problem is not None:
            raise ValueError(f"task {problem}")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> ReplayRequest:
        window = self.since is not None or self.until is not None
        if self.ids is not None and (window or self.task is not None):
            raise ValueError("give ids, or a since/until window (and task), not both")
        if self.ids is None and not window:
            raise ValueError("give ids, or since and/or until (task alone is not enough)")
        return self


class NoBody(AdminBody):
    """A route that takes no body (``POST /admin/configs/{key}/enable``): nothing, or
    ``{}``."""


REPLAY_USAGE: Final = (
    'send {"ids": [...]} or {"since": t, "until": t, "task": id} (t: Unix seconds)'
)

Body = TypeVar("Body", bound=AdminBody)


class BodyError(ValueError):
    """A request body its model refused; the message names the key and what is wrong."""


def parse_body(model: type[Body], raw: bytes, usage: str) -> Body:
    """``raw`` (empty: ``{}``) read as ``model``; :class:`BodyError` naming the first
    problem's key, with ``usage`` after it."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        raise BodyError(f"{_first_problem(exc)}; {usage}") from None


def _first_problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    kind = first["type"]
    where = ".".join(str(p) for p in first["loc"])
    if kind == "json_invalid":
        return "the body is not valid JSON"
    if kind == "extra_forbidden":
        return f"{where}: unknown key"
    if kind == "model_type":
        return "the body must be a JSON object"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


# ---- answers -------------------------------------------------------------------------


class Answer(BaseModel):
    """An answer of the gateway's API: camelCase keys on the wire."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON the gateway answers with (every key, nulls included)."""
        return self.model_dump(by_alias=True, mode="json")


class EventAccepted(Answer):
    """``POST /v1/tasks/{taskId}/events``: the event is durable; its deliveries are queued."""

    task_id: str
    seq: int = Field(description="the event's sequence number in its task")
    deliveries: int = Field(description="deliveries queued (one per enabled config)")


class AgentIdentity(Answer):
    """``GET /v1/agent``: the agent the API key sent belongs to (a client's check that
    it reaches the gateway and that its key is one of the gateway's agents)."""

    agent_id: str = Field(description="the agent's id in the gateway's agents")


class DeliveryView(Answer):
    """One delivery (one event to one config), as the admin API shows it."""

    model_config = ConfigDict(title="Delivery")

    id: str
    task_id: str
    config_key: str
    state: str = Field(description="pending, delivered, dead, ...")
    attempts: int
    seq: int
    last_error: str | None
    created_at: float | None = Field(description=_UNIX_TIME)
    leased_until: float | None = Field(
        description="a worker holds it until then (in flight, or its worker died)"
    )
    endpoint: str | None = Field(
        default=None,
        description="scheme://host:port the delivery was queued for (null: queued before "
        "this was recorded)",
    )


class AttemptView(Answer):
    """One HTTP attempt of a delivery."""

    model_config = ConfigDict(title="Attempt")

    number: int = Field(description="the delivery's attempt count after it (a replay restarts)")
    started_at: float = Field(description=_UNIX_TIME)
    duration: float = Field(description="seconds")
    endpoint: str = Field(description="scheme://host:port (never the URL's path or query)")
    verdict: Literal["delivered", "retry", "dead", "gone"]
    status: int | None = Field(description="the HTTP status; null when there was no answer")
    error_class: str | None = Field(
        description="when there was no answer: " + ", ".join(ATTEMPT_ERROR_CLASSES)
    )
    error: str | None
    retry_at: float | None = Field(description="for a retry: when the next attempt is due")
    response: str = Field(
        description="the first 1 KiB of the answer's body as received (never decompressed), "
        "base64; credentials the receiver echoed are cut out"
    )
    response_bytes: int = Field(description="how many bytes response holds")

    @classmethod
    def of(cls, a: Attempt) -> AttemptView:
        return cls(
            number=a.number,
            started_at=a.started_at,
            duration=a.duration,
            endpoint=a.endpoint,
            verdict=a.verdict,
            status=a.status,
            error_class=a.error_class,
            error=a.error,
            retry_at=a.retry_at,
            response=base64.b64encode(a.response).decode("ascii"),
            response_bytes=len(a.response),
        )


class AttemptList(Answer):
    """``GET /admin/deliveries/{id}/attempts``: the delivery's attempts, oldest first."""

    attempts: list[AttemptView]
    recording: bool = Field(description="whether this gateway records attempts (attempt_history)")


class DeliveryList(Answer):
    """``GET /admin/deliveries``: a page, oldest first (pass the last id as ``after``)."""

    deliveries: list[DeliveryView]


class Replayed(Answer):
    """``POST /admin/deliveries/replay``: how many dead letters were queued again."""

    replayed: int


class OpenEndpoints(Answer):
    """``GET /admin/endpoints``: webhook hosts whose circuit breaker is open."""

    open: list[str]


class ConfigState(Answer):
    """``POST /admin/configs/{key}/{action}``: the config's new state."""

    key: str
    enabled: bool


class Health(Answer):
    """``GET /healthz`` when the database answers."""

    status: Literal["ok"]
