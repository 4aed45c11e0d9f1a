-- Shortlist schema, version 10 (SQLite): a run can be cancelled. migrations/postgres/0010 is the
-- same in the other dialect.
--
-- Cancelling a generation fails its queued jobs at once (last_error says who cancelled and
-- when) and stamps its running ones with cancel_requested_at_ms and the reason: their workers
-- read the stamp with each heartbeat, finish the unit in hand (a case, a load step) and fail
-- the job with that reason instead of going on. Failed, not a state of its own: a cancelled
-- job ended without its result, as a failed one did, and no retry brings it back.
ALTER TABLE jobs ADD COLUMN cancel_requested_at_ms INTEGER;
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;
