-- Schema version 5 -> 6: the tokens of committed writes (`commit_tokens`), by which a node whose
-- commit answer was lost learns whether the write was stored.
CREATE TABLE commit_tokens (
    token bigint PRIMARY KEY,
    at    bigint NOT NULL
);
