"""a2a-push: durable, signed, retried, ordered A2A push notifications."""
