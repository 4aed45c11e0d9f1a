-- Shortlist schema, version 7: progress wakes its readers. Every stored progress event notifies
-- channel `shortlist_progress` (payload: the job id), so a web page served by one process follows
-- jobs that other hosts' workers run without polling the table. Readers still read the rows: a
-- notification only says "look now" (one lost while a listener reconnects costs a poll interval).

CREATE FUNCTION shortlist_notify_progress() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('shortlist_progress', NEW.job_id::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER progress_events_notify AFTER INSERT ON progress_events
    FOR EACH ROW EXECUTE FUNCTION shortlist_notify_progress();
