"""The delivery console: web pages over the outbox for operators (see docs/console.md)."""

from .app import Console, ConsoleSource

__all__ = ["Console", "ConsoleSource"]
