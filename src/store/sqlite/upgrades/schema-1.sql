-- Parasol's whole SQLite schema (schema version 1).
-- Applied once to a new database by src/store/migrate.rs; later versions append migrations
-- rather than editing what has shipped. Timestamps are integer seconds since the Unix epoch (UTC).

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
    -- next position on the domain list (see domains.seq); only ever grows
    domain_seq            INTEGER NOT NULL DEFAULT 0,
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

-- The domain list: one row per name and organization. `seq` is the entry's position counter
-- within its organization (taken from organizations.domain_seq), so it orders the same way as
-- `id` there. domain_buckets counts the live entries per 1024 positions and
-- domain_superbuckets per 65536, which lets a page be found by reading a few dozen counts
-- instead of an OFFSET scan over the whole list.
CREATE TABLE domains (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    last_seen_at    INTEGER NOT NULL,
    UNIQUE (organization_id, name)
);
CREATE UNIQUE INDEX domains_org_seq ON domains(organization_id, seq);

CREATE TABLE domain_buckets (
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    bucket          INTEGER NOT NULL,   -- seq >> 10
    count           INTEGER NOT NULL CHECK (count > 0),
    PRIMARY KEY (organization_id, bucket)
) WITHOUT ROWID;

CREATE TABLE domain_superbuckets (
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    bucket          INTEGER NOT NULL,   -- seq >> 16
    count           INTEGER NOT NULL CHECK (count > 0),
    PRIMARY KEY (organization_id, bucket)
) WITHOUT ROWID;

-- One row per accepted POST /1.0/events request.
CREATE TABLE event_batches (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    organization_id INTEGER NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    uuid            TEXT NOT NULL,       -- the id returned in the 202 body, hyphenated form
    received_at     INTEGER NOT NULL
);
CREATE INDEX event_batches_org ON event_batches(organization_id);

-- The events of a batch, clustered by batch so that deleting an organization is range deletes.
CREATE TABLE events (
    batch_id INTEGER NOT NULL REFERENCES event_batches(id) ON DELETE CASCADE,
    idx      INTEGER NOT NULL,           -- position in the request's array (0 for a single event)
    domain   TEXT NOT NULL,              -- normalised dstDomain
    listed   INTEGER NOT NULL,           -- 1 if the acceptance checks put the domain on the list
    body     TEXT NOT NULL,              -- the event as sent (JSON), unknown fields included
    PRIMARY KEY (batch_id, idx)
) WITHOUT ROWID;

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
