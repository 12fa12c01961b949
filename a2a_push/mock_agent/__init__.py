"""A small but complete A2A v1.0 agent on aiohttp, with push notifications by a2a-push.

    a2a-push mock-agent --port 9000 --allow-webhook-host 127.0.0.1
    python -m a2a_push.mock_agent --port 9000 --allow-webhook-host 127.0.0.1 --log-level INFO

Serves JSON-RPC at ``/`` (``SendMessage``, ``GetTask``, ``CancelTask``, ``ListTasks``,
the four push-config methods, and ``SendStreamingMessage`` and ``SubscribeToTask`` as
Server-Sent Events; the v0.3 names ``message/send``, ``message/stream``, ``tasks/get``,
``tasks/cancel``, ``tasks/resubscribe`` and ``tasks/pushNotificationConfig/*`` with
v0.3 shapes), the REST
push-config routes, the agent card at ``/.well-known/agent-card.json``, the JWKS at
``/.well-known/jwks.json`` and Prometheus metrics at ``/metrics``.

Skills, chosen by the first word of the message's text:

* ``roll NdM``  working -> ``dice-result`` artifact -> completed
* ``book X``    input-required (asks for a date); a follow-up message with the same
  ``taskId`` -> ``order`` artifact -> completed
* ``report``    several chunked artifact updates (``append`` / ``lastChunk``) -> completed
* ``fail``      failed;  ``reject``: rejected;  ``login``: auth-required (a follow-up
  message "signs in" and completes it)
* anything else: ``echo`` — submitted -> working -> ``echo`` artifact -> completed

Every step pauses ``step_delay`` seconds (0.5 by default) so a client can watch or cancel.
Every task change goes through ``notifier.publish``: webhooks are durable, signed,
retried and ordered; and to each open stream of the task (docs/mock-agent.md). Tasks
live in memory, scoped to the caller (the same owner resolver the push-config methods
use: a digest of the ``Authorization`` header).
"""

from a2a_push.httputil import SSE_KEEPALIVE_SECONDS as KEEPALIVE_SECONDS

from .agent import GatewayPushConfigs, MockAgent
from .app import (
    AGENT,
    AGENT_NAME,
    DEFAULT_HOST,
    DEFAULT_PORT,
    agent_card,
    create_app,
    serve,
    serving,
)
from .flows import DEFAULT_STEP_DELAY, SKILLS, GatewayLink
from .streams import STREAM_QUEUE_LIMIT
from .tasks import MAX_MESSAGE_DEPTH, TaskRecord, TaskStore

__all__ = [
    "AGENT",
    "AGENT_NAME",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_STEP_DELAY",
    "KEEPALIVE_SECONDS",
    "MAX_MESSAGE_DEPTH",
    "SKILLS",
    "STREAM_QUEUE_LIMIT",
    "GatewayLink",
    "GatewayPushConfigs",
    "MockAgent",
    "TaskRecord",
    "TaskStore",
    "agent_card",
    "create_app",
    "serve",
    "serving",
]
