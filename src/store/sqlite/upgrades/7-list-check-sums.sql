-- Schema version 6 -> 7: the paging counts keep, beside each block's count, the sums of its
-- entries' two residues (`residue_sum`, `square_sum`; see `entry_residues` in
-- src/store/model.rs), so that a list's check is summed from its blocks instead of scanned.
-- Level-1 rows (blocks of 1024 positions) sum their entries; level-0 rows (65536) sum the
-- level-1 rows inside them, as their counts do.
ALTER TABLE domain_counts ADD COLUMN residue_sum INTEGER NOT NULL DEFAULT 0;
ALTER TABLE domain_counts ADD COLUMN square_sum INTEGER NOT NULL DEFAULT 0;

UPDATE domain_counts SET (residue_sum, square_sum) = (
    SELECT coalesce(sum(x), 0), coalesce(sum(x * x % 2147483647), 0)
    FROM (SELECT d.id % 2147483647 * 48271 % 2147483647 AS x
          FROM domains d
          WHERE d.organization_id = domain_counts.organization_id
            AND d.seq >= domain_counts.block * 1024
            AND d.seq < (domain_counts.block + 1) * 1024)
)
WHERE level = 1;

UPDATE domain_counts SET (residue_sum, square_sum) = (
    SELECT coalesce(sum(b.residue_sum), 0), coalesce(sum(b.square_sum), 0)
    FROM domain_counts b
    WHERE b.organization_id = domain_counts.organization_id
      AND b.level = 1
      AND b.block >= domain_counts.block * 64
      AND b.block < (domain_counts.block + 1) * 64
)
WHERE level = 0;
