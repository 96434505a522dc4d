-- 005: the fleet. The send queue lives in Redis from here on; a message
-- this ledger held queued or sending before is 'legacy': at start it joins
-- the fleet's queue once (unless Redis knows it). Messages accepted since
-- are the fleet's alone: a row of theirs left 'queued' (another instance
-- sent it, or its hold lapsed before the 202) is never sent from here.
ALTER TABLE messages ADD COLUMN legacy INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET legacy = 1 WHERE state IN ('queued', 'sending');
