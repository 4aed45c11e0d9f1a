-- Shortlist schema, version 3 (SQLite): schedules and their ticks. migrations/postgres/0003 is
-- the same in PostgreSQL's dialect.

CREATE TABLE schedules (
    id              INTEGER PRIMARY KEY,
    name            TEXT    NOT NULL UNIQUE,
    study           TEXT    NOT NULL,
    study_version   INTEGER,
    cron            TEXT    NOT NULL,
    tz              TEXT    NOT NULL,
    what            TEXT    NOT NULL CHECK (what IN ('quality', 'load', 'all')),
    candidates      TEXT    NOT NULL DEFAULT '',
    enabled         INTEGER NOT NULL DEFAULT 1,
    from_ms         INTEGER NOT NULL,
    created_at_ms   INTEGER NOT NULL
);

CREATE TABLE schedule_ticks (
    id              INTEGER PRIMARY KEY,
    schedule_id     INTEGER NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    due_ms          INTEGER NOT NULL,
    state           TEXT    NOT NULL CHECK (state IN ('started', 'skipped', 'failed')),
    study_version   INTEGER,
    generation      INTEGER,
    detail          TEXT,
    claimed_by      TEXT    NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    UNIQUE (schedule_id, due_ms)
);
CREATE INDEX schedule_ticks_by_schedule ON schedule_ticks (schedule_id, due_ms);

CREATE TABLE baselines (
    id              INTEGER PRIMARY KEY,
    study_id        INTEGER NOT NULL REFERENCES studies (id),
    generation      INTEGER NOT NULL CHECK (generation >= 1),
    accepted_by     TEXT    NOT NULL,
    accepted_at_ms  INTEGER NOT NULL
);
CREATE INDEX baselines_by_study ON baselines (study_id, id);
