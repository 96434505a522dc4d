-- 006: admin actions (docs/architecture.md, "Limits and rules": overrides,
-- blocks, unlock), one row each with the admin key's name, never a key.
-- body is the row as stored (canonical values, the note), or the unlock's
-- request.
CREATE TABLE admin_actions (
  id         INTEGER PRIMARY KEY,
  ts_ms      INTEGER NOT NULL,
  admin      TEXT NOT NULL,                -- the admin key's configured name
  action     TEXT NOT NULL CHECK (action IN ('add', 'remove', 'unlock')),
  kind       TEXT NOT NULL CHECK (kind IN ('override', 'block', 'lock')),
  row_id     TEXT,                         -- the override's or block's id
  body       TEXT,                         -- JSON
  note       TEXT,
  expires_ms INTEGER,                      -- Redis's clock; NULL for remove and unlock
  result     INTEGER                       -- unlock: fields cleared
);
CREATE INDEX admin_actions_ts ON admin_actions (ts_ms);
