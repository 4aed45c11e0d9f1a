-- Shortlist schema, version 11 (SQLite): a run ends with its job. migrations/postgres/0011 is the
-- same in the other dialect.
--
-- A run was finished only by the job body that completed it: a job that failed for good, or was
-- cancelled, left its run `running` for ever (the home page's recent runs said so). Now the
-- store fails a job's unfinished runs in the same step that fails the job, with the job's
-- error, and stamps cancelled_at_ms when the job was cancelled: failed, as a cancelled job is,
-- and told apart the same way. A retried job's run starts again and loses the stamp.
ALTER TABLE runs ADD COLUMN cancelled_at_ms INTEGER;
