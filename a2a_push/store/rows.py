"""Mapping database rows to store records: one definition for the SQL backends."""

from __future__ import annotations

from typing import Any

from ..errors import SecretDecryptionError
from .base import Attempt, Delivery, DeliveryState, StoredConfig
from .secrets import SecretBox

# A column for listings of deliveries (``FROM deliveries d``): when the lease on the
# delivery's lane ends, if a worker holds one and the delivery is the lane's head.
LEASED_UNTIL = (
    "(SELECT l.due_at FROM lanes l WHERE l.config_key = d.config_key "
    "AND l.task_id = d.task_id AND l.head_id = d.id AND l.lease_owner IS NOT NULL) "
    "AS leased_until"
)


_ATTEMPT_FIELDS = tuple(name for name in Attempt.__dataclass_fields__ if name != "response")


class RowMapping:
    """Builds configs and deliveries from rows (``sqlite3.Row`` or ``asyncpg.Record``).

    Both backends name their columns alike; secrets are opened with ``_box``.
    """

    _box: SecretBox

    def _config_from_row(self, row: Any, prefix: str = "") -> StoredConfig:
        token, credentials = self._box.open(row[prefix + "secrets"])
        return StoredConfig(
            key=row[prefix + "key"],
            id=row[prefix + "id"],
            task_id=row[prefix + "task_id"],
            owner=row[prefix + "owner"],
            tenant=row[prefix + "tenant"],
            url=row[prefix + "url"],
            token=token,
            auth_scheme=row[prefix + "auth_scheme"],
            auth_credentials=credentials,
            protocol_version=row[prefix + "protocol_version"],
            enabled=bool(row[prefix + "enabled"]),
            disabled_reason=row[prefix + "disabled_reason"],
            failing_since=row[prefix + "failing_since"],
            created_at=row[prefix + "created_at"],
        )

    @staticmethod
    def _delivery_from_row(
        row: Any, config: StoredConfig | None = None, config_error: str | None = None
    ) -> Delivery:
        """The delivery of ``row``; never raises for a corrupt row (one written by another
        tool, say): that one comes back as :meth:`_unreadable` says, so that a listing, or
        a dead-letter replay by filter, still shows every other row, and this one with
        what is wrong with it."""
        try:
            return RowMapping._delivery_fields(_fields(row), config, config_error)
        except Exception as exc:
            return RowMapping._unreadable(row, exc)

    @staticmethod
    def _unreadable(row: Any, exc: Exception) -> Delivery:
        """A corrupt delivery row as a delivery without a body or config, and with the
        reason in ``config_error`` (the dispatcher dead-letters such a delivery)."""
        try:
            state = DeliveryState(row["state"])
        except ValueError:
            state = DeliveryState.DEAD  # a state that is none of ours is never sent
        reason = _corrupt(exc)
        return Delivery(
            id=str(row["id"]),
            config_key=str(row["config_key"]),
            task_id=str(row["task_id"]),
            seq=_int_or_zero(row["seq"]),
            kind=str(row["kind"]),
            body=b"",
            state=state,
            attempts=_int_or_zero(row["attempts"]),
            next_attempt_at=0.0,
            created_at=0.0,
            updated_at=0.0,
            last_error=str(row["last_error"]) if row["last_error"] is not None else reason,
            config=None,
            config_error=reason,
        )

    @staticmethod
    def _delivery_fields(
        row: dict[str, Any], config: StoredConfig | None, config_error: str | None
    ) -> Delivery:
        return Delivery(
            id=row["id"],
            config_key=row["config_key"],
            task_id=row["task_id"],
            seq=_int(row["seq"], "seq"),
            kind=row["kind"],
            body=_body(row["body"]),
            state=_state(row["state"]),
            attempts=_int(row["attempts"], "attempts"),
            rounds=_int(row["rounds"], "rounds"),
            next_attempt_at=row["next_attempt_at"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_status=row["last_status"],
            last_error=row["last_error"],
            config=config,
            config_error=config_error,
            leased_until=row.get("leased_until"),
            endpoint=row.get("endpoint"),
            traceparent=row.get("traceparent"),
        )

    @staticmethod
    def _attempt_from_row(row: Any) -> Attempt:
        """An ``attempts`` row (its columns are named as Attempt's fields)."""
        fields = {name: row[name] for name in _ATTEMPT_FIELDS}
        return Attempt(**fields, response=bytes(row["response"] or b""))

    def _claimed_from_row(self, row: Any) -> Delivery:
        """A delivery row joined with its config (``c_`` columns), as claims return it.

        Never raises for a corrupt row (one written by another tool, say): the delivery
        comes back without a config and with the reason in ``config_error``, so the
        dispatcher dead-letters it and every other lane goes on."""
        config, config_error = None, None
        row = _fields(row)
        if row["c_key"] is not None:
            try:
                config = self._config_from_row(row, prefix="c_")
            except SecretDecryptionError as exc:
                config_error = str(exc)
            except Exception as exc:
                config_error = f"the stored config is corrupt ({type(exc).__name__}: {exc})"
        return self._delivery_from_row(row, config, config_error)


def _fields(row: Any) -> dict[str, Any]:
    """A row (``sqlite3.Row``, ``asyncpg.Record``, or a dict already) as a dict of its
    columns: a claimed row has thirty, and a ``sqlite3.Row`` finds a column by name by
    comparing it with each in turn, where a dict hashes it once."""
    if isinstance(row, dict):
        return row
    return dict(zip(row.keys(), row, strict=True))


def _state(value: Any) -> DeliveryState:
    try:
        return DeliveryState(value)
    except ValueError:
        raise ValueError(_state_problem(value)) from None


def _state_problem(value: Any) -> str:
    return f"its state is {str(value)[:40]!r}"


def _corrupt(problem: object) -> str:
    return f"the stored delivery is corrupt: {problem}"


def _int(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"its {name} is {type(value).__name__}, not an integer")
    return value


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) else 0


def corrupt_state_reason(state: Any) -> str:
    """The reason a delivery whose state is none of ours is dead-lettered with."""
    return _corrupt(_state_problem(state))


def _body(value: Any) -> bytes:
    """A stored body: bytes (a BLOB, or text another tool wrote, as UTF-8); never the
    zero-filled buffer ``bytes(int)`` would make of a number."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    raise TypeError(f"its body is {type(value).__name__}, not bytes")
