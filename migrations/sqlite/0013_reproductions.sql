-- Shortlist schema, version 13 (SQLite): quality runs asked again, and whether they reproduced.
-- migrations/postgres/0013 is the same in the other dialect.
--
-- `study reproduce` asks a finished quality run's cases again with the same candidate and
-- decoding and compares each answer with the stored one. Each such check is kept (never changed),
-- so a record can say when it was last reproduced, where, and how many answers came back the same.
CREATE TABLE reproductions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    study_id      INTEGER NOT NULL REFERENCES studies (id),
    generation    INTEGER NOT NULL,
    candidate     TEXT    NOT NULL,
    ok            INTEGER NOT NULL CHECK (ok IN (0, 1)),
    document      TEXT    NOT NULL,  -- the check as `study reproduce --json` prints it
    created_at_ms INTEGER NOT NULL
);

CREATE INDEX reproductions_by_candidate ON reproductions (study_id, candidate, generation);
