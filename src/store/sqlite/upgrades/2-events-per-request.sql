-- Schema version 1 -> 2: a request's events move from one `events` row each into its
-- `event_batches` row (three JSON arrays), in the order they were sent.
CREATE TABLE event_batches_v2 (
    id              INTEGER PRIMARY KEY,
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    uuid            TEXT NOT NULL,       -- the id returned in the 202 body, hyphenated form
    received_at     INTEGER NOT NULL,
    event_count     INTEGER NOT NULL CHECK (event_count > 0),
    domains         TEXT NOT NULL,       -- JSON array: each event's normalised dstDomain
    listed          TEXT NOT NULL,       -- JSON array: 1 if the acceptance checks listed it, else 0
    events          TEXT NOT NULL        -- JSON array: the events as sent, unknown fields included
);

INSERT INTO event_batches_v2 (id, organization_id, uuid, received_at, event_count, domains, listed, events)
SELECT b.id, b.organization_id, b.uuid, b.received_at,
       count(*),
       json_group_array(e.domain ORDER BY e.idx),
       json_group_array(e.listed ORDER BY e.idx),
       '[' || group_concat(e.body, ',' ORDER BY e.idx) || ']'
FROM event_batches b JOIN events e ON e.batch_id = b.id
GROUP BY b.id;

DROP TABLE events;
DROP TABLE event_batches;
ALTER TABLE event_batches_v2 RENAME TO event_batches;
CREATE INDEX event_batches_org ON event_batches(organization_id);
