"""The receiver API's bodies and answers as pydantic models, for its OpenAPI document
(``GET /openapi.json``). The handlers in :mod:`receiver.api` check bodies by hand (with
messages the docs give) and the answers come from :mod:`receiver.core`; the tests check
served answers against these schemas.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from a2a_push.openapi import ErrorBody


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class SubscriptionRequest(_Camel):
    """``POST /subscriptions``: follow a task of an agent (the receiver registers a push
    config on the agent)."""

    agent_url: str = Field(min_length=1, max_length=2048, description="a configured agent's URL")
    task_id: str = Field(min_length=1, max_length=256)


class SubscriptionView(_Camel):
    """A client's subscription to a task."""

    model_config = ConfigDict(title="Subscription")

    id: str
    agent_url: str
    task_id: str
    state: str = Field(description="pending, active, ...")
    created_at: float = Field(description="Unix seconds")
    deleted_at: float | None = Field(default=None, description="Unix seconds; once deleted")


class DeletedSubscription(SubscriptionView):
    """``DELETE /subscriptions/{id}``: the subscription, and whether the agent's push
    config was removed too."""

    removed_on_agent: bool


class SubscriptionList(_Camel):
    """A page of the client's subscriptions, oldest first."""

    subscriptions: list[SubscriptionView]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null: last")


class TaskList(_Camel):
    """The latest snapshots of the client's tasks (A2A Task objects)."""

    tasks: list[dict[str, Any]]


class ClientEvent(_Camel):
    """The ``data`` of one event of ``GET /events`` (its ``event:`` is the kind, its
    ``id:`` the Last-Event-ID to resume after)."""

    agent_url: str
    task_id: str
    task: dict[str, Any] = Field(description="the task's snapshot after the event (A2A Task)")


class WebhookAccepted(BaseModel):
    """A webhook taken (or a repeat of one already taken)."""

    status: Literal["accepted", "duplicate"]


class WebhookRefused(ErrorBody):
    """A refused webhook; ``retryAfter`` when the sender should retry later."""

    retry_after: int | None = Field(default=None, alias="retryAfter")


class Health(BaseModel):
    """``GET /healthz``."""

    status: Literal["ok", "unavailable"]
    reason: str | None = Field(default=None, description="when unavailable: the failure's type")
