-- Shortlist schema, version 6: job groups. The shards of one quality run share a group; the job
-- after them waits until every job of the group is done or failed (a job names one dependency,
-- a group gathers several). The same in both dialects.

ALTER TABLE jobs ADD COLUMN grp TEXT;
ALTER TABLE jobs ADD COLUMN waits_for_grp TEXT;
CREATE INDEX jobs_by_grp ON jobs (grp, state);
