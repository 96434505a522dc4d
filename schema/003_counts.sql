-- 003: refusals and other 4xx answers are written in aggregate: one row per
-- caller, phone, device, address, decision, rule and second, with how many
-- requests it stands for (1 for every other row).
ALTER TABLE requests ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
