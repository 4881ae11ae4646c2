-- Parasol's whole SQLite schema, as of schema version 6.
-- src/store/sqlite/migrate.rs applies it to a new database; a database of an earlier version is brought
-- here by the scripts in src/store/sqlite/upgrades/ instead (each shipped version's schema is kept there
-- for the upgrade tests). Timestamps are integer seconds since the Unix epoch (UTC).

-- ---------------------------------------------------------------- tenants

-- Packages a service provider or customer can subscribe to (`packageId`).
CREATE TABLE packages (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
INSERT INTO packages (id, name) VALUES
    (1, 'DNS Security Essentials'),
    (2, 'DNS Security Advantage'),
    (3, 'Secure Internet Gateway Essentials'),
    (4, 'Secure Internet Gateway Advantage');

CREATE TABLE service_providers (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    package_id  INTEGER NOT NULL REFERENCES packages(id),
    seats_total INTEGER NOT NULL CHECK (seats_total >= 0),
    status      TEXT NOT NULL DEFAULT 'Active',
    rebill_at   INTEGER,
    expires_at  INTEGER,
    created_at  INTEGER NOT NULL
);

CREATE TABLE msps (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- An organization is the tenant of both interfaces. A customer of a service provider or of an MSP
-- is an organization (its customerId is the organization id); a stand-alone organization has
-- neither parent.
CREATE TABLE organizations (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    name                  TEXT NOT NULL,
    service_provider_id   INTEGER REFERENCES service_providers(id) ON DELETE CASCADE,
    msp_id                INTEGER REFERENCES msps(id) ON DELETE CASCADE,
    seats                 INTEGER NOT NULL DEFAULT 1,
    package_id            INTEGER REFERENCES packages(id),
    street_address        TEXT,
    street_address2       TEXT,
    city                  TEXT,
    state                 TEXT,
    country_code          TEXT,
    zip_code              TEXT,
    deal_id               TEXT,
    admin_emails          TEXT NOT NULL DEFAULT '[]',  -- JSON array of strings
    ccw_deal_owner_emails TEXT NOT NULL DEFAULT '[]',  -- JSON array of strings
    created_at            INTEGER NOT NULL,
    modified_at           INTEGER NOT NULL,
    CHECK (service_provider_id IS NULL OR msp_id IS NULL)
);
CREATE INDEX organizations_provider ON organizations(service_provider_id) WHERE service_provider_id IS NOT NULL;
CREATE INDEX organizations_msp ON organizations(msp_id) WHERE msp_id IS NOT NULL;

-- Enforcement customer keys (UUID v4, lower-case hyphenated). Revoked keys stay for the record.
CREATE TABLE customer_keys (
    key             TEXT PRIMARY KEY,
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    created_at      INTEGER NOT NULL,
    revoked_at      INTEGER
) WITHOUT ROWID;
CREATE INDEX customer_keys_org ON customer_keys(organization_id);

-- Management API credentials (HTTP Basic). Exactly one scope column is set.
CREATE TABLE api_credentials (
    api_key             TEXT PRIMARY KEY,
    secret_hash         TEXT NOT NULL,              -- argon2id PHC string
    service_provider_id INTEGER REFERENCES service_providers(id) ON DELETE CASCADE,
    msp_id              INTEGER REFERENCES msps(id) ON DELETE CASCADE,
    organization_id     INTEGER REFERENCES organizations(id) ON DELETE CASCADE,
    label               TEXT,
    created_at          INTEGER NOT NULL,
    revoked_at          INTEGER,
    CHECK ((service_provider_id IS NOT NULL) + (msp_id IS NOT NULL) + (organization_id IS NOT NULL) = 1)
) WITHOUT ROWID;

-- ---------------------------------------------------------------- enforcement

-- The domain list: one row per name and organization. `seq` is the entry's position within its
-- organization: each new entry gets one above the organization's highest, so it orders the same
-- way as `id` there (a position freed at the end of the list may be taken again; an id never is).
--
-- Ids are given by the database writer, one above both the highest id in the table and
-- `domain_id_floor`, which the trigger below raises to every deleted id: so an id is never
-- reused, and a stale id can never delete another domain, without the per-commit write of
-- AUTOINCREMENT's counter.
CREATE TABLE domains (
    id              INTEGER PRIMARY KEY,
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    last_seen_at    INTEGER NOT NULL,
    UNIQUE (organization_id, name)
);
CREATE UNIQUE INDEX domains_org_seq ON domains(organization_id, seq);

-- One row: the highest domain id ever deleted (0 if none).
CREATE TABLE domain_id_floor (
    floor INTEGER NOT NULL
);
INSERT INTO domain_id_floor (floor) VALUES (0);

CREATE TRIGGER domains_id_floor AFTER DELETE ON domains
WHEN old.id > (SELECT floor FROM domain_id_floor)
BEGIN
    UPDATE domain_id_floor SET floor = old.id;
END;

-- Live entries counted per block of positions, so that a page is found by reading a few dozen
-- counts instead of an OFFSET scan over the whole list: level 0 counts blocks of 65536 positions
-- (seq >> 16), level 1 blocks of 1024 (seq >> 10). Only closed blocks of 1024 are counted, those
-- below the one new entries go into; that open block (the list's last) gets its row once new
-- entries move past it, so adding names writes no count most of the time. A level-0 row counts the
-- entries of the closed blocks of 1024 inside it. Every entry past the highest counted block of
-- 1024 is in the open block.
--
-- Beside each count, the sums of the block's entries' two residues (`entry_residues` in
-- src/store/model.rs): a list's length and check (what the exporter compares with the entries it
-- holds) are then the level-0 rows' sums plus the open block's entries, not a scan of the list.
CREATE TABLE domain_counts (
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    level           INTEGER NOT NULL CHECK (level IN (0, 1)),
    block           INTEGER NOT NULL,
    count           INTEGER NOT NULL CHECK (count > 0),
    residue_sum     INTEGER NOT NULL DEFAULT 0,
    square_sum      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (organization_id, level, block)
) WITHOUT ROWID;

-- One row per accepted POST /1.0/events request, holding all its events: a request is stored and
-- deleted whole, and a 1 MiB batch is one record instead of thousands of rows. The three arrays
-- have one element per event, in the order sent (`SELECT value FROM json_each(events)`).
--
-- No index on `organization_id` and no foreign key: nothing reads an organization's requests by
-- organization, and both would be written or checked with every request. When an organization
-- is deleted, the trigger below records it in `event_purges`, and the server deletes its rows in
-- the background, a range of ids at a time (src/store/purge.rs). Organization ids are never
-- reused (AUTOINCREMENT), so a row still waiting for the purge is never taken for another's.
CREATE TABLE event_batches (
    id              INTEGER PRIMARY KEY,
    organization_id INTEGER NOT NULL,    -- organizations(id), see above
    uuid            TEXT NOT NULL,       -- the id returned in the 202 body, hyphenated form
    received_at     INTEGER NOT NULL,
    event_count     INTEGER NOT NULL CHECK (event_count > 0),
    domains         TEXT NOT NULL,       -- JSON array: each event's normalised dstDomain
    listed          TEXT NOT NULL,       -- JSON array: 1 if the acceptance checks listed it, else 0
    events          TEXT NOT NULL        -- JSON array: the events as sent, unknown fields included
);

-- Deleted organizations whose stored requests are still being deleted: those with ids up to
-- `up_to` (the table's highest when the organization went; no later row can be its), of which
-- those up to `done` are gone.
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

-- Organizations whose effective block list (domain list minus allow list) may have changed since
-- the resolver exporter (`parasol serve --export-dir`) last wrote it: recorded by whatever lists
-- or deletes names or changes an allow list, and by the trigger below when an organization goes.
-- The exporter takes the rows and rewrites those organizations' files (or removes them).
CREATE TABLE list_changes (
    organization_id INTEGER PRIMARY KEY
);

CREATE TRIGGER organizations_list_changes AFTER DELETE ON organizations
BEGIN
    INSERT OR IGNORE INTO list_changes (organization_id) VALUES (old.id);
END;

-- The customer's allow list: wins over the domain list at enforcement time.
CREATE TABLE allow_list (
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (organization_id, name)
) WITHOUT ROWID;

-- ---------------------------------------------------------------- management resources
-- (per-organization resources of the management interface)

-- Built-in roles, shared by all organizations (organizationId 0 in responses).
CREATE TABLE roles (
    id    INTEGER PRIMARY KEY,
    label TEXT NOT NULL UNIQUE
);
INSERT INTO roles (id, label) VALUES
    (1, 'Full Admin'),
    (2, 'Read Only'),
    (3, 'Block Page Bypass'),
    (4, 'Reporting Only'),
    (5, 'Investigate Only'),
    (6, 'Security Administrator');

-- A single sequence for the originId of every identity (site, network, roaming computer,
-- internal network, virtual appliance), as the cloud draws them from one space.
CREATE TABLE origins (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL
);
-- originIds start above 10,000,000 (eight digits, like the cloud's), so that they never coincide
-- with a siteId and a client that mixes the two up fails at once instead of by chance.
INSERT INTO sqlite_sequence (name, seq) VALUES ('origins', 10000000);

CREATE TABLE sites (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,  -- siteId
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    origin_id       INTEGER NOT NULL UNIQUE REFERENCES origins(id),
    name            TEXT NOT NULL,
    is_default      INTEGER NOT NULL DEFAULT 0,
    type            TEXT NOT NULL DEFAULT 'site',
    created_at      INTEGER NOT NULL,
    modified_at     INTEGER NOT NULL
);
CREATE INDEX sites_org ON sites(organization_id);
CREATE UNIQUE INDEX sites_one_default ON sites(organization_id) WHERE is_default = 1;

CREATE TABLE networks (
    origin_id       INTEGER PRIMARY KEY REFERENCES origins(id),  -- networkId
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    ip_address      TEXT NOT NULL,
    prefix_length   INTEGER NOT NULL CHECK (prefix_length BETWEEN 29 AND 32),
    is_dynamic      INTEGER NOT NULL DEFAULT 0,
    is_verified     INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'OPEN',
    created_at      INTEGER NOT NULL
);
CREATE INDEX networks_org ON networks(organization_id);

CREATE TABLE roaming_computers (
    device_id        TEXT NOT NULL,           -- roamingComputerId (hex)
    organization_id  INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    origin_id        INTEGER NOT NULL UNIQUE REFERENCES origins(id),
    name             TEXT NOT NULL,
    type             TEXT NOT NULL DEFAULT 'roaming',
    status           TEXT NOT NULL DEFAULT 'Off',
    last_sync_status TEXT,
    last_sync        INTEGER,
    applied_bundle   INTEGER,
    has_ip_blocking  INTEGER NOT NULL DEFAULT 0,
    version          TEXT,
    os_version       TEXT,
    os_version_name  TEXT,
    PRIMARY KEY (organization_id, device_id)
);

CREATE TABLE internal_networks (
    origin_id       INTEGER PRIMARY KEY REFERENCES origins(id),  -- internalNetworkId
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    ip_address      TEXT NOT NULL,
    prefix_length   INTEGER NOT NULL CHECK (prefix_length BETWEEN 8 AND 32),
    site_id         INTEGER NOT NULL REFERENCES sites(id),
    created_at      INTEGER NOT NULL,
    modified_at     INTEGER NOT NULL
);
CREATE INDEX internal_networks_org ON internal_networks(organization_id);
CREATE INDEX internal_networks_site ON internal_networks(site_id);

CREATE TABLE virtual_appliances (
    origin_id        INTEGER PRIMARY KEY REFERENCES origins(id),  -- virtualApplianceId
    organization_id  INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    site_id          INTEGER NOT NULL REFERENCES sites(id),
    is_upgradable    INTEGER NOT NULL DEFAULT 0,
    state            TEXT NOT NULL,   -- JSON object (the spec's state members)
    health           TEXT NOT NULL DEFAULT 'okay',
    type             TEXT NOT NULL DEFAULT 'virtual_appliance',
    settings         TEXT NOT NULL,   -- JSON object (the spec's settings members)
    created_at       INTEGER NOT NULL,
    modified_at      INTEGER NOT NULL,
    state_updated_at INTEGER NOT NULL
);
CREATE INDEX virtual_appliances_org ON virtual_appliances(organization_id);
CREATE INDEX virtual_appliances_site ON virtual_appliances(site_id);

CREATE TABLE users (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id   INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    firstname         TEXT NOT NULL,
    lastname          TEXT NOT NULL,
    email             TEXT NOT NULL,
    password_hash     TEXT NOT NULL,   -- argon2id PHC string; never returned
    role_id           INTEGER NOT NULL REFERENCES roles(id),
    timezone          TEXT NOT NULL,
    status            TEXT NOT NULL DEFAULT 'Active',
    last_login_time   INTEGER,
    two_factor_enable INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    UNIQUE (organization_id, email COLLATE NOCASE)
);
