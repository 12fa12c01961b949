"""Examples beside the package: ``a2a_sdk_agent`` (an a2a-sdk agent pushing through a2a-push)."""
