-- The W3C traceparent of the publish that queued a delivery (NULL when tracing was off),
-- sent on its webhook so that the receiver continues the publisher's trace.
ALTER TABLE deliveries ADD COLUMN traceparent TEXT;
