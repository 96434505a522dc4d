-- 009: the Twilio Verify surface's changes are admin actions too: its
-- services, rate limits and buckets (kind), created, updated and deleted
-- (action 'update' beside 'add' and 'remove'). A CHECK cannot be altered
-- in SQLite, so admin_actions is rebuilt with the same columns and rows
-- (ids kept, so every digest and link stays valid) and its counter is
-- carried over.
CREATE TABLE admin_actions_009 (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms      INTEGER NOT NULL,
  admin      TEXT NOT NULL,                -- the admin key's or the caller's configured name
  action     TEXT NOT NULL CHECK (action IN ('add', 'remove', 'unlock', 'update')),
  kind       TEXT NOT NULL CHECK (kind IN ('override', 'block', 'lock', 'service', 'rate_limit', 'bucket')),
  row_id     TEXT,
  body       TEXT,
  note       TEXT,
  expires_ms INTEGER,
  result     INTEGER
);
INSERT INTO admin_actions_009 SELECT id, ts_ms, admin, action, kind, row_id, body, note, expires_ms, result
  FROM admin_actions;
CREATE TEMP TABLE seq_009 AS SELECT seq FROM sqlite_sequence WHERE name = 'admin_actions';
DROP TABLE admin_actions;
ALTER TABLE admin_actions_009 RENAME TO admin_actions;
CREATE INDEX admin_actions_ts ON admin_actions (ts_ms);
DELETE FROM sqlite_sequence WHERE name = 'admin_actions';
INSERT INTO sqlite_sequence (name, seq)
  SELECT 'admin_actions', max(COALESCE((SELECT max(seq) FROM seq_009), 0),
                              COALESCE((SELECT max(id) FROM admin_actions), 0));
DROP TABLE seq_009;
