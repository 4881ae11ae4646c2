-- Schema version 4 -> 5: the organizations whose effective block list may have changed since
-- the resolver exporter last wrote it (`list_changes`), filled by whatever changes a list
-- (names listed or deleted, allow-list entries added or removed) and by a trigger when an
-- organization goes.

CREATE TABLE list_changes (
    organization_id INTEGER PRIMARY KEY
);

CREATE TRIGGER organizations_list_changes AFTER DELETE ON organizations
BEGIN
    INSERT OR IGNORE INTO list_changes (organization_id) VALUES (old.id);
END;
