"""The outbox's SQL, one folder per backend: named queries (``queries.sql``) and ordered
migrations (``NNNN_*.sql``), loaded by ``a2a_push.database``."""
