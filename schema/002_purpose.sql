-- 002: what the caller said the code is for ("login", "reset", ...), as sent
-- in POST /v1/otp's purpose (at most 32 printable bytes).
ALTER TABLE requests ADD COLUMN purpose TEXT;
