-- 007: the hash chain (src/ledger/chain.h). Every row otpd writes from here
-- on, and every later change of a messages or verifications row, appends
-- one link: the row's table and rowid, its retention time, the SHA-256 of
-- its content, and the SHA-256 of the previous link's hash and this link.
-- An edit, a deletion or a reordering of rows breaks the chain at that
-- row (`otpctl verify`).
CREATE TABLE chain (
  seq    INTEGER PRIMARY KEY,              -- 1, 2, 3, ... without gaps
  tbl    TEXT NOT NULL,                    -- the row's table, or 'prune'
  row_id INTEGER NOT NULL,                 -- its rowid; prune: the base's seq
  ts_ms  INTEGER NOT NULL,                 -- the time retention prunes it by; prune: the cutoff
  digest BLOB NOT NULL,                    -- SHA-256 of the row's content
  hash   BLOB NOT NULL                     -- SHA-256 of the previous hash and this link
);
-- Where the chain begins: rows already in a ledger upgraded to 007 (rowid
-- at or below these marks) carry no link. The marks are hashed into the
-- first link's predecessor.
CREATE TABLE chain_start (
  id             INTEGER PRIMARY KEY CHECK (id = 1),
  started_ms     INTEGER NOT NULL,
  requests       INTEGER NOT NULL,
  verifications  INTEGER NOT NULL,
  messages       INTEGER NOT NULL,
  message_events INTEGER NOT NULL,
  sends          INTEGER NOT NULL,
  admin_actions  INTEGER NOT NULL
);
INSERT INTO chain_start VALUES (1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
  (SELECT COALESCE(max(rowid), 0) FROM requests), (SELECT COALESCE(max(rowid), 0) FROM verifications),
  (SELECT COALESCE(max(rowid), 0) FROM messages), (SELECT COALESCE(max(rowid), 0) FROM message_events),
  (SELECT COALESCE(max(rowid), 0) FROM sends), (SELECT COALESCE(max(rowid), 0) FROM admin_actions));
-- The link before the first one kept: seq 0 at the start; retention moves
-- it (with a 'prune' link saying so) when it deletes old links.
CREATE TABLE chain_base (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  seq  INTEGER NOT NULL,
  hash BLOB NOT NULL                       -- seq 0: unused, the start's marks stand for it
);
INSERT INTO chain_base VALUES (1, 0, zeroblob(32));
