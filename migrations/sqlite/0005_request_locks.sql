-- Shortlist schema, version 5 (SQLite): a lease that serializes run requests of one study
-- version across processes. migrations/postgres/0005 is the same in PostgreSQL's dialect.

CREATE TABLE request_locks (
    name            TEXT    PRIMARY KEY,
    holder          TEXT    NOT NULL,
    until_ms        INTEGER NOT NULL
);
