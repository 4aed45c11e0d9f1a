-- Shortlist schema, version 5 (PostgreSQL): a lease that serializes run requests of one study
-- version across processes — two workbenches (or a workbench and a scheduler) asked to run the
-- same study at once queue one generation, not two. A holder that died loses the lease when
-- `until_ms` passes. migrations/sqlite/0005 is the same in SQLite's dialect.

CREATE TABLE request_locks (
    name            TEXT   PRIMARY KEY,
    holder          TEXT   NOT NULL,
    until_ms        BIGINT NOT NULL
);
