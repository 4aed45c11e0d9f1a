-- Shortlist schema, version 12 (SQLite): a version number is never given to other content.
-- migrations/postgres/0012 is the same in the other dialect.
--
-- The next version of a name was the highest stored one plus one, so removing the latest
-- version of an eval set, candidate, workload or SLO and storing other content under its name
-- gave that content the removed version's number: "support v3" named two different files over
-- time. Now each removed version leaves its number and hash here; the next version counts them
-- too, and the same content stored again gets its old number back (a number names one content,
-- for ever). Asking for a removed version says it was removed, and when.
CREATE TABLE removed_versions (
    kind          TEXT NOT NULL,   -- the table it was removed from: eval_sets, candidates, workloads, slos
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    sha256        TEXT NOT NULL,
    removed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, name, version)
);
