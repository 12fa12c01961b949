"""The a2a-push receiver: verifies A2A webhooks, fetches tasks with GetTask, serves them."""
