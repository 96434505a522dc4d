-- 001: the audit ledger. Every decision, message, send and verification;
-- never a code, never a secret. Times are Unix milliseconds.

CREATE TABLE requests (
  id              INTEGER PRIMARY KEY,
  ts_ms           INTEGER NOT NULL,
  kind            TEXT NOT NULL CHECK (kind IN ('issue', 'verify')),
  api_key         TEXT NOT NULL,           -- the caller's configured name, not the key
  phone           TEXT NOT NULL,
  device_id       TEXT,
  client_ip       TEXT,
  decision        TEXT NOT NULL,           -- accepted, verified, rate_limited, locked, ...
  rule            TEXT,                    -- the rule that refused
  shadow          TEXT,                    -- shadow rules that would have refused
  verification_id TEXT,
  message_id      TEXT,
  http_status     INTEGER NOT NULL
);
CREATE INDEX requests_phone ON requests (phone, ts_ms);

CREATE TABLE verifications (
  id         TEXT PRIMARY KEY,
  phone      TEXT NOT NULL,
  api_key    TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  status     TEXT NOT NULL DEFAULT 'pending'
             CHECK (status IN ('pending', 'verified', 'exhausted')),
  wrong      INTEGER NOT NULL DEFAULT 0,   -- wrong guesses
  ended_ms   INTEGER
);

-- The durable queue: a message is committed 'queued' before its 202.
CREATE TABLE messages (
  seq             INTEGER PRIMARY KEY,     -- acceptance order, the queue's order
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
  price_minor     INTEGER NOT NULL DEFAULT -1,  -- reserved against the cost caps; -1: none
  cost_ms         INTEGER NOT NULL DEFAULT 0,   -- Redis time of the reservation
  provider_id     TEXT,
  detail          TEXT
);
CREATE INDEX messages_state ON messages (state, seq);

CREATE TABLE message_events (
  id         INTEGER PRIMARY KEY,
  message_id TEXT NOT NULL,
  ts_ms      INTEGER NOT NULL,
  state      TEXT NOT NULL,
  detail     TEXT
);
CREATE INDEX message_events_message ON message_events (message_id);

CREATE TABLE sends (
  id          INTEGER PRIMARY KEY,
  message_id  TEXT NOT NULL,
  ts_ms       INTEGER NOT NULL,
  attempt     INTEGER NOT NULL,            -- 1 for the first try
  provider    TEXT NOT NULL,
  http_status INTEGER,                     -- NULL when no answer came
  latency_ms  INTEGER NOT NULL,
  outcome     TEXT NOT NULL CHECK (outcome IN ('sent', 'transient', 'permanent')),
  provider_id TEXT,
  error       TEXT,
  cost_minor  INTEGER
);
CREATE INDEX sends_message ON sends (message_id);
