-- Shortlist schema, version 7: on PostgreSQL, stored progress notifies its readers (LISTEN/NOTIFY).
-- SQLite has no such channel and serves one host: readers poll the table. Nothing changes here;
-- the version is kept in step with PostgreSQL's.
SELECT 1;
