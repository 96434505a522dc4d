-- 008: a row id is never used twice. Without AUTOINCREMENT SQLite gives a
-- new row the largest id in its table plus one, so once retention emptied a
-- table its next row took the id of a pruned row whose link the chain still
-- held, and `otpctl verify` took the new row for a changed old one. Each
-- table is rebuilt with the same columns and rows (rowids kept, so every
-- digest and link stays valid); verifications, whose key is its text id,
-- gets seq, an INTEGER PRIMARY KEY that its rowid becomes. The counters
-- start past every id a row, a link or a start mark ever used.
CREATE TABLE requests_008 (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms           INTEGER NOT NULL,
  kind            TEXT NOT NULL CHECK (kind IN ('issue', 'verify')),
  api_key         TEXT NOT NULL,
  phone           TEXT NOT NULL,
  device_id       TEXT,
  client_ip       TEXT,
  decision        TEXT NOT NULL,
  rule            TEXT,
  shadow          TEXT,
  verification_id TEXT,
  message_id      TEXT,
  http_status     INTEGER NOT NULL,
  purpose         TEXT,
  count           INTEGER NOT NULL DEFAULT 1
);
INSERT INTO requests_008 SELECT id, ts_ms, kind, api_key, phone, device_id, client_ip, decision, rule, shadow,
  verification_id, message_id, http_status, purpose, count FROM requests;
DROP TABLE requests;
ALTER TABLE requests_008 RENAME TO requests;
CREATE INDEX requests_phone ON requests (phone, ts_ms);

CREATE TABLE verifications_008 (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  id         TEXT NOT NULL UNIQUE,
  phone      TEXT NOT NULL,
  api_key    TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  status     TEXT NOT NULL DEFAULT 'pending'
             CHECK (status IN ('pending', 'verified', 'exhausted')),
  wrong      INTEGER NOT NULL DEFAULT 0,
  ended_ms   INTEGER
);
INSERT INTO verifications_008 SELECT rowid, id, phone, api_key, created_ms, expires_ms, status, wrong, ended_ms
  FROM verifications;
DROP TABLE verifications;
ALTER TABLE verifications_008 RENAME TO verifications;

CREATE TABLE messages_008 (
  seq             INTEGER PRIMARY KEY AUTOINCREMENT,
  id              TEXT NOT NULL UNIQUE,
  verification_id TEXT NOT NULL,
  api_key         TEXT NOT NULL,
  phone           TEXT NOT NULL,
  state           TEXT NOT NULL
                  CHECK (state IN ('queued', 'sending', 'sent', 'delivered', 'failed', 'expired')),
  created_ms      INTEGER NOT NULL,
  expires_ms      INTEGER NOT NULL,
  updated_ms      INTEGER NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  price_minor     INTEGER NOT NULL DEFAULT -1,
  cost_ms         INTEGER NOT NULL DEFAULT 0,
  provider_id     TEXT,
  detail          TEXT,
  cost_caps       TEXT,
  legacy          INTEGER NOT NULL DEFAULT 0
);
INSERT INTO messages_008 SELECT seq, id, verification_id, api_key, phone, state, created_ms, expires_ms,
  updated_ms, attempts, price_minor, cost_ms, provider_id, detail, cost_caps, legacy FROM messages;
DROP TABLE messages;
ALTER TABLE messages_008 RENAME TO messages;
CREATE INDEX messages_state ON messages (state, seq);

CREATE TABLE message_events_008 (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id TEXT NOT NULL,
  ts_ms      INTEGER NOT NULL,
  state      TEXT NOT NULL,
  detail     TEXT
);
INSERT INTO message_events_008 SELECT id, message_id, ts_ms, state, detail FROM message_events;
DROP TABLE message_events;
ALTER TABLE message_events_008 RENAME TO message_events;
CREATE INDEX message_events_message ON message_events (message_id);

CREATE TABLE sends_008 (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id  TEXT NOT NULL,
  ts_ms       INTEGER NOT NULL,
  attempt     INTEGER NOT NULL,
  provider    TEXT NOT NULL,
  http_status INTEGER,
  latency_ms  INTEGER NOT NULL,
  outcome     TEXT NOT NULL CHECK (outcome IN ('sent', 'transient', 'permanent')),
  provider_id TEXT,
  error       TEXT,
  cost_minor  INTEGER
);
INSERT INTO sends_008 SELECT id, message_id, ts_ms, attempt, provider, http_status, latency_ms, outcome,
  provider_id, error, cost_minor FROM sends;
DROP TABLE sends;
ALTER TABLE sends_008 RENAME TO sends;
CREATE INDEX sends_message ON sends (message_id);

CREATE TABLE admin_actions_008 (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms      INTEGER NOT NULL,
  admin      TEXT NOT NULL,
  action     TEXT NOT NULL CHECK (action IN ('add', 'remove', 'unlock')),
  kind       TEXT NOT NULL CHECK (kind IN ('override', 'block', 'lock')),
  row_id     TEXT,
  body       TEXT,
  note       TEXT,
  expires_ms INTEGER,
  result     INTEGER
);
INSERT INTO admin_actions_008 SELECT id, ts_ms, admin, action, kind, row_id, body, note, expires_ms, result
  FROM admin_actions;
DROP TABLE admin_actions;
ALTER TABLE admin_actions_008 RENAME TO admin_actions;
CREATE INDEX admin_actions_ts ON admin_actions (ts_ms);

-- Each counter past the table's rows, its start mark and its links.
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence (name, seq)
  SELECT t.name, max(t.mark, COALESCE(t.top, 0), COALESCE((SELECT max(row_id) FROM chain WHERE tbl = t.name), 0))
  FROM (SELECT 'requests' AS name, s.requests AS mark, (SELECT max(rowid) FROM requests) AS top FROM chain_start s
        UNION ALL SELECT 'verifications', s.verifications, (SELECT max(rowid) FROM verifications) FROM chain_start s
        UNION ALL SELECT 'messages', s.messages, (SELECT max(rowid) FROM messages) FROM chain_start s
        UNION ALL SELECT 'message_events', s.message_events, (SELECT max(rowid) FROM message_events)
                  FROM chain_start s
        UNION ALL SELECT 'sends', s.sends, (SELECT max(rowid) FROM sends) FROM chain_start s
        UNION ALL SELECT 'admin_actions', s.admin_actions, (SELECT max(rowid) FROM admin_actions)
                  FROM chain_start s) t;
