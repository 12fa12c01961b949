"""The push-config methods (JSON-RPC and REST) and the JWKS route, for aiohttp agents.

service = PushConfigService(notifier, task_lookup=my_tasks.lookup)
mount(app, service)            # POST /, /tasks/{taskId}/pushNotificationConfigs..., JWKS
"""

from a2a_push.server.app import (
    PUSH_SIGNING_EXTENSION_URI,
    PUSH_SIGNING_EXTENSION_URIS,
    agent_card_push_fields,
    mount,
)
from a2a_push.server.inline import parse_inline_config, register_inline_config
from a2a_push.server.push_config import (
    OwnerResolver,
    PushConfigService,
    TaskLookup,
    default_owner_resolver,
    negotiate_version,
)

__all__ = [
    "PUSH_SIGNING_EXTENSION_URI",
    "PUSH_SIGNING_EXTENSION_URIS",
    "OwnerResolver",
    "PushConfigService",
    "TaskLookup",
    "agent_card_push_fields",
    "default_owner_resolver",
    "mount",
    "negotiate_version",
    "parse_inline_config",
    "register_inline_config",
]
