-- 004: the cost-cap windows a message's reservation was counted in
-- (window_ms, comma-separated), so a refund after a restart gives back to
-- those caps only, whatever the caps are by then. NULL on older rows:
-- unknown, nothing is given back to any cap.
ALTER TABLE messages ADD COLUMN cost_caps TEXT;
