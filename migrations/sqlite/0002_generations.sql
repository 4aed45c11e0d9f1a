-- Shortlist schema, version 2 (SQLite): run generations, who ran what where, persisted progress,
-- and a queue that knows dependencies and retry backoff. migrations/postgres/0002 is the same in
-- PostgreSQL's dialect.
--
-- `runs` had UNIQUE (study_id, candidate, kind, label): one run per study version, ever. A study
-- version can now be run again (a nightly run, a rerun after a fix) as a new generation without
-- touching earlier runs, so the key gains `generation`. SQLite cannot change a table's
-- constraints in place: the table is rebuilt, following SQLite's documented procedure (foreign
-- keys off, outside a transaction, then one transaction for the rebuild and a check).
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

-- A generation is one request to run a locked study version: manual, by a schedule, or by the API.
CREATE TABLE generations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    study_id      INTEGER NOT NULL REFERENCES studies (id),
    number        INTEGER NOT NULL CHECK (number >= 1),
    run_trigger   TEXT    NOT NULL CHECK (run_trigger IN ('manual', 'schedule', 'api')),
    params_json   TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (study_id, number)
);

-- Every study that has runs gets its generation 1, as the runs before this schema were.
INSERT INTO generations (study_id, number, run_trigger, params_json, created_at_ms)
SELECT study_id, 1, 'manual', '{}', MIN(created_at_ms) FROM runs GROUP BY study_id;

CREATE TABLE runs_v2 (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    study_id       INTEGER NOT NULL REFERENCES studies (id),
    generation     INTEGER NOT NULL DEFAULT 1 CHECK (generation >= 1),
    candidate      TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('fit', 'quality', 'load', 'sweep')),
    label          TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('pending', 'running', 'done', 'failed')),
    error          TEXT,
    run_trigger    TEXT    NOT NULL DEFAULT 'manual',
    -- The worker that executed the run last, its machine fingerprint (JSON) and code version.
    worker         TEXT,
    machine_json   TEXT,
    code_version   TEXT,
    created_at_ms  INTEGER NOT NULL,
    started_at_ms  INTEGER,
    finished_at_ms INTEGER,
    UNIQUE (study_id, generation, candidate, kind, label)
);
INSERT INTO runs_v2 (id, study_id, generation, candidate, kind, label, state, error, run_trigger,
                     created_at_ms, started_at_ms, finished_at_ms)
SELECT id, study_id, 1, candidate, kind, label, state, error, 'manual',
       created_at_ms, started_at_ms, finished_at_ms FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
CREATE INDEX runs_by_study ON runs (study_id, generation);

-- A record names the generation it was assembled from.
ALTER TABLE selection_records ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;

-- The queue: what a job belongs to (indexed, so a page can list a study's jobs without reading
-- every payload), when a retried job may run again, and the job it waits for.
ALTER TABLE jobs ADD COLUMN study TEXT;
ALTER TABLE jobs ADD COLUMN study_version INTEGER;
ALTER TABLE jobs ADD COLUMN generation INTEGER;
ALTER TABLE jobs ADD COLUMN candidate TEXT;
ALTER TABLE jobs ADD COLUMN not_before_ms INTEGER;
ALTER TABLE jobs ADD COLUMN depends_on INTEGER REFERENCES jobs (id);
UPDATE jobs SET study = json_extract(payload_json, '$.study'),
                study_version = json_extract(payload_json, '$.version'),
                candidate = json_extract(payload_json, '$.candidate'),
                generation = 1;
CREATE INDEX jobs_by_study ON jobs (study, study_version, generation, id);

-- Typed progress of each job (JSON of the runner's progress event), written at a bounded rate, so
-- that any process can follow a run from the database alone.
CREATE TABLE progress_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     INTEGER NOT NULL REFERENCES jobs (id),
    at_ms      INTEGER NOT NULL,
    event_json TEXT    NOT NULL
);
CREATE INDEX progress_by_job ON progress_events (job_id, id);

-- Cases of a quality run whose request failed outside the model (transport, HTTP status,
-- timeout): not results, so a resumed run asks them again; removed when the case is answered.
CREATE TABLE case_errors (
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    case_id     TEXT    NOT NULL,
    attempts    INTEGER NOT NULL,
    error       TEXT    NOT NULL,
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (run_id, case_id)
);

COMMIT;
PRAGMA foreign_keys = ON;
