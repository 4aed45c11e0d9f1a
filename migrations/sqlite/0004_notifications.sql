-- Shortlist schema, version 4 (SQLite): each scheduled night's check, webhooks and their
-- deliveries. migrations/postgres/0004 is the same in PostgreSQL's dialect.

-- A night's regression check, stored once its run finished (the document the webhooks get).
ALTER TABLE schedule_ticks ADD COLUMN verdict TEXT;
ALTER TABLE schedule_ticks ADD COLUMN report TEXT;
ALTER TABLE schedule_ticks ADD COLUMN checked_at_ms INTEGER;

CREATE TABLE webhooks (
    id              INTEGER PRIMARY KEY,
    schedule_id     INTEGER NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    url             TEXT    NOT NULL,
    secret          TEXT    NOT NULL,
    enabled         INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    failures        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    last_attempt_ms INTEGER,
    created_at_ms   INTEGER NOT NULL,
    UNIQUE (schedule_id, url)
);

CREATE TABLE deliveries (
    id              INTEGER PRIMARY KEY,
    webhook_id      INTEGER NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    schedule_id     INTEGER NOT NULL,
    due_ms          INTEGER NOT NULL,
    body            TEXT    NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'delivered')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL,
    last_error      TEXT,
    created_at_ms   INTEGER NOT NULL,
    delivered_at_ms INTEGER,
    UNIQUE (webhook_id, schedule_id, due_ms)
);
CREATE INDEX deliveries_pending ON deliveries (state, next_attempt_ms);
