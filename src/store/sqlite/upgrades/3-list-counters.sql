-- Schema version 2 -> 3: the domain list's counters are written far less often. Ids come from
-- the writer (above the highest id and `domain_id_floor`) instead of AUTOINCREMENT, whose counter
-- row was rewritten in every commit that listed a name; positions no longer have a counter of
-- their own (`organizations.domain_seq`); the two tables of block counts become one,
-- `domain_counts`, in which the open block has no row. The counts of version 2 cover every block
-- including the last, which is consistent with that: new entries then go into the block after
-- the highest counted one.

CREATE TABLE domain_id_floor (
    floor INTEGER NOT NULL
);
-- AUTOINCREMENT's counter is the highest id ever given: no id up to it is given again.
INSERT INTO domain_id_floor (floor)
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'domains'), 0);

CREATE TABLE domains_v3 (
    id              INTEGER PRIMARY KEY,
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    last_seen_at    INTEGER NOT NULL,
    UNIQUE (organization_id, name)
);
INSERT INTO domains_v3 (id, organization_id, name, seq, created_at, last_seen_at)
SELECT id, organization_id, name, seq, created_at, last_seen_at FROM domains ORDER BY id;
DROP TABLE domains;
ALTER TABLE domains_v3 RENAME TO domains;
CREATE UNIQUE INDEX domains_org_seq ON domains(organization_id, seq);

CREATE TRIGGER domains_id_floor AFTER DELETE ON domains
WHEN old.id > (SELECT floor FROM domain_id_floor)
BEGIN
    UPDATE domain_id_floor SET floor = old.id;
END;

CREATE TABLE domain_counts (
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    level           INTEGER NOT NULL CHECK (level IN (0, 1)),
    block           INTEGER NOT NULL,
    count           INTEGER NOT NULL CHECK (count > 0),
    PRIMARY KEY (organization_id, level, block)
) WITHOUT ROWID;
INSERT INTO domain_counts (organization_id, level, block, count)
SELECT organization_id, 0, bucket, count FROM domain_superbuckets;
INSERT INTO domain_counts (organization_id, level, block, count)
SELECT organization_id, 1, bucket, count FROM domain_buckets;
DROP TABLE domain_superbuckets;
DROP TABLE domain_buckets;

ALTER TABLE organizations DROP COLUMN domain_seq;
