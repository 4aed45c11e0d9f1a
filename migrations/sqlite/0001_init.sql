-- Shortlist schema, version 1 (SQLite). migrations/postgres/0001_init.sql holds the same tables
-- in PostgreSQL's dialect; the two files change together and keep the same numbering.
-- Times the store stamps are Unix milliseconds (INTEGER); the study lock time is the RFC 3339
-- text the study was locked with. JSON is stored as TEXT so that both dialects read it alike.

-- Content that is versioned by hash: the same (name, content) is stored once, and a new content
-- under a known name becomes the next version.
CREATE TABLE eval_sets (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    sha256        TEXT    NOT NULL,
    yaml          TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (name, version),
    UNIQUE (name, sha256)
);

CREATE TABLE candidates (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    sha256        TEXT    NOT NULL,
    config_json   TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (name, version),
    UNIQUE (name, sha256)
);

CREATE TABLE workloads (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    sha256        TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('trace', 'spec')),
    body          TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (name, version),
    UNIQUE (name, sha256)
);

CREATE TABLE slos (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    sha256        TEXT    NOT NULL,
    toml          TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (name, version),
    UNIQUE (name, sha256)
);

-- A study row is a draft (file_json only) until it is locked; then canonical, sha256 and
-- locked_at are set together and the row is frozen by the triggers below.
CREATE TABLE studies (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    file_json     TEXT    NOT NULL,
    canonical     TEXT,
    sha256        TEXT,
    locked_at     TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (name, version),
    CHECK ((canonical IS NULL AND sha256 IS NULL AND locked_at IS NULL)
        OR (canonical IS NOT NULL AND sha256 IS NOT NULL AND locked_at IS NOT NULL))
);

-- The database itself refuses to change or remove a locked study, whoever asks.
CREATE TRIGGER studies_locked_no_update BEFORE UPDATE ON studies
WHEN OLD.locked_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'study row is locked: UPDATE refused (edit a new version instead)');
END;

CREATE TRIGGER studies_locked_no_delete BEFORE DELETE ON studies
WHEN OLD.locked_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'study row is locked: DELETE refused');
END;

CREATE TABLE runs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    study_id       INTEGER NOT NULL REFERENCES studies (id),
    candidate      TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('fit', 'quality', 'load', 'sweep')),
    label          TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('pending', 'running', 'done', 'failed')),
    error          TEXT,
    created_at_ms  INTEGER NOT NULL,
    started_at_ms  INTEGER,
    finished_at_ms INTEGER,
    UNIQUE (study_id, candidate, kind, label)
);

-- One row per (run, case): a resumed run inserts nothing twice.
CREATE TABLE case_results (
    run_id        INTEGER NOT NULL REFERENCES runs (id),
    case_id       TEXT    NOT NULL,
    passed        INTEGER NOT NULL CHECK (passed IN (0, 1)),
    output        TEXT    NOT NULL,
    scores_json   TEXT    NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    latency_s     REAL    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, case_id)
);

CREATE TABLE load_results (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id          INTEGER NOT NULL REFERENCES runs (id),
    label           TEXT    NOT NULL,
    offered_rps     REAL,
    histograms_json TEXT    NOT NULL,
    records         TEXT,
    records_path    TEXT,
    created_at_ms   INTEGER NOT NULL,
    UNIQUE (run_id, label),
    CHECK ((records IS NULL) <> (records_path IS NULL))
);

CREATE TABLE selection_records (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    study_id      INTEGER NOT NULL REFERENCES studies (id),
    candidate     TEXT    NOT NULL,
    record_json   TEXT    NOT NULL,
    record_sha256 TEXT    NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL
);

CREATE TABLE jobs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    kind           TEXT    NOT NULL,
    payload_json   TEXT    NOT NULL,
    state          TEXT    NOT NULL DEFAULT 'queued'
                   CHECK (state IN ('queued', 'running', 'done', 'failed')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    max_attempts   INTEGER NOT NULL,
    claimed_by     TEXT,
    claimed_at_ms  INTEGER,
    heartbeat_ms   INTEGER,
    last_error     TEXT,
    created_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER
);

CREATE INDEX jobs_by_state ON jobs (state, id);
