-- Schema version 3 -> 4: an organization's request rows get ids of their own range (from
-- `organization_id << 40` up), so that the index on `event_batches.organization_id`, written with
-- every request, can go; the foreign key's cascade goes with it (without that index it would scan
-- the whole table for every deleted organization) and a trigger on `organizations` deletes the
-- rows instead. Every stored request is copied once, in its order within its organization.
-- (src/store/migrate.rs refuses the upgrade beforehand if an organization id is 2^23 or more.)

CREATE TABLE event_batches_v4 (
    id              INTEGER PRIMARY KEY, -- (organization_id << 40) + the request's number there
    organization_id INTEGER NOT NULL CHECK (organization_id = id >> 40),
    uuid            TEXT NOT NULL,       -- the id returned in the 202 body, hyphenated form
    received_at     INTEGER NOT NULL,
    event_count     INTEGER NOT NULL CHECK (event_count > 0),
    domains         TEXT NOT NULL,       -- JSON array: each event's normalised dstDomain
    listed          TEXT NOT NULL,       -- JSON array: 1 if the acceptance checks listed it, else 0
    events          TEXT NOT NULL        -- JSON array: the events as sent, unknown fields included
);
INSERT INTO event_batches_v4
    (id, organization_id, uuid, received_at, event_count, domains, listed, events)
SELECT (organization_id << 40) + row_number() OVER (PARTITION BY organization_id ORDER BY id),
       organization_id, uuid, received_at, event_count, domains, listed, events
FROM event_batches
ORDER BY organization_id, id;
DROP TABLE event_batches;
ALTER TABLE event_batches_v4 RENAME TO event_batches;

CREATE TRIGGER organizations_event_batches AFTER DELETE ON organizations
BEGIN
    DELETE FROM event_batches WHERE id >= old.id << 40 AND id < (old.id + 1) << 40;
END;

CREATE TRIGGER organizations_id_limit AFTER INSERT ON organizations
WHEN new.id >= 1 << 23
BEGIN
    SELECT RAISE(ABORT, 'organization ids are limited to 8388607');
END;
