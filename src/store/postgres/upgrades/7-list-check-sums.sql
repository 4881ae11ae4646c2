-- Schema version 6 -> 7: the paging counts (and their delta rows) keep, beside each block's
-- count, the sums of its entries' two residues (`residue_sum`, `square_sum`; see
-- `entry_residues` in src/store/model.rs), so that a list's check is summed from its blocks
-- instead of scanned. The counts are rebuilt from the lists, the deltas folded in on the way.
ALTER TABLE domain_counts
    ADD COLUMN residue_sum bigint NOT NULL DEFAULT 0,
    ADD COLUMN square_sum bigint NOT NULL DEFAULT 0;
ALTER TABLE domain_count_deltas
    ADD COLUMN residue_sum bigint NOT NULL DEFAULT 0,
    ADD COLUMN square_sum bigint NOT NULL DEFAULT 0;

DELETE FROM domain_count_deltas;
DELETE FROM domain_counts;
INSERT INTO domain_counts (organization_id, level, block, count, residue_sum, square_sum)
    SELECT organization_id, level, id >> shift, count(*),
           sum(x)::bigint, sum(x * x % 2147483647)::bigint
    FROM (SELECT organization_id, id, id % 2147483647 * 48271 % 2147483647 AS x FROM domains) d
    CROSS JOIN (VALUES (0::smallint, 16), (1::smallint, 10)) AS l(level, shift)
    GROUP BY organization_id, level, id >> shift;
