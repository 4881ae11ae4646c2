-- Schema version 3 -> 4: the stored requests lose their index on `organization_id` and their
-- foreign key, both written or checked with every request; a deleted organization's requests are
-- deleted in the background instead (`event_purges`, src/store/purge.rs). SQLite cannot drop a
-- foreign key in place, so the table is copied once, ids kept.

CREATE TABLE event_batches_v4 (
    id              INTEGER PRIMARY KEY,
    organization_id INTEGER NOT NULL,    -- organizations(id), see schema.sql
    uuid            TEXT NOT NULL,       -- the id returned in the 202 body, hyphenated form
    received_at     INTEGER NOT NULL,
    event_count     INTEGER NOT NULL CHECK (event_count > 0),
    domains         TEXT NOT NULL,       -- JSON array: each event's normalised dstDomain
    listed          TEXT NOT NULL,       -- JSON array: 1 if the acceptance checks listed it, else 0
    events          TEXT NOT NULL        -- JSON array: the events as sent, unknown fields included
);
INSERT INTO event_batches_v4
    (id, organization_id, uuid, received_at, event_count, domains, listed, events)
SELECT id, organization_id, uuid, received_at, event_count, domains, listed, events
FROM event_batches
ORDER BY id;
DROP TABLE event_batches;
ALTER TABLE event_batches_v4 RENAME TO event_batches;

CREATE TABLE event_purges (
    organization_id INTEGER PRIMARY KEY,
    up_to           INTEGER NOT NULL,
    done            INTEGER NOT NULL DEFAULT 0
);

CREATE TRIGGER organizations_event_purges AFTER DELETE ON organizations
BEGIN
    INSERT INTO event_purges (organization_id, up_to)
        VALUES (old.id, (SELECT coalesce(max(id), 0) FROM event_batches));
END;
