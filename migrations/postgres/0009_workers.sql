-- Shortlist schema, version 9 (PostgreSQL): the workers a database has seen. migrations/sqlite/0009
-- is the same in the other dialect.
--
-- Each worker process (`serve`'s workers, `shortlist worker`, `study run`) says it is alive
-- every beat_ms, idle or busy, so that a page can tell queued jobs that wait for a busy worker
-- from queued jobs that no worker will ever take. A worker that stops cleanly stamps
-- stopped_at_ms; one that dies just stops being seen. machine_json is its machine fingerprint.
CREATE TABLE workers (
    name          TEXT    PRIMARY KEY,
    host          TEXT    NOT NULL,
    machine_json  TEXT    NOT NULL,
    started_at_ms BIGINT NOT NULL,
    seen_at_ms    BIGINT NOT NULL,
    beat_ms       BIGINT NOT NULL,
    stopped_at_ms BIGINT
);
