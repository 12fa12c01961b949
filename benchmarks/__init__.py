"""a2a-push benchmarks B1-B8, each with its target (each module says how it measures):

- B1 (``b1_throughput``): end-to-end signed (ES256) and durable (SQLite) deliveries/s to
  a local sink: at least 5x the official a2a-sdk ``BasePushNotificationSender``, at
  least 0.5x a raw aiohttp POST loop, and at least 0.8x the minimal durable signed
  sender (that loop with an ES256 JWT and an fsynced SQLite log), in the same run.
- B2 (``b2_latency``): publish -> sink receipt latency at a steady 500 events/s: p99 at
  most 20 ms.
- B3 (``b3_isolation``): one healthy endpoint's p99 while 20 blackholed endpoints have
  work: at most 1.5x its p99 alone.
- B4 (``b4_backlog``): 100,000 pending deliveries: RSS at most 200 MB, drain rate within
  20 % of B1's.
- B5 (``b5_receiver``): receiver throughput, verified (JWT, replay check, persist)
  notifications/s: at least 2,000/s, ``GetTask`` calls coalesced per task.
- B6 (``b6_gateway``): the gateway on PostgreSQL with 1 and 2 workers: no duplicate sends
  and nothing lost without crashes; throughput beside embedded SQLite.
- B7 (``b7_console``): the console's filtered deliveries page (50 of 1,000,000 deliveries
  with 3,000,000 attempts) while B2's load runs: p99 at most 100 ms on SQLite and on
  PostgreSQL.
- B8 (``b8_streams``): 500 concurrent streams on the mock agent (SendStreamingMessage)
  while the same tasks push webhooks: memory per open stream, stream events/s beside
  webhooks/s, and B2's p99 with the streams open at most 1.5x its p99 without.

``python -m benchmarks`` runs them all; ``python -m benchmarks b2`` runs one. Numbers are
printed, never asserted: no test depends on timing.
"""
