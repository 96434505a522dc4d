-- queue.lua: the fleet's send queue (docs/architecture.md, "The pacer and
-- the fleet"). One stream, otp:q, with one consumer group, 'senders'; each
-- otpd instance is one consumer (pacer.instance). issue.lua holds a
-- message (otp:holds) and its commit adds it to the stream once the
-- instance's ledger rows are durable; an entry leaves the stream (XACK and
-- XDEL) when its message ends, so XLEN counts every message accepted and
-- not yet ended, claimed or not, and issue.lua bounds XLEN + ZCARD(holds)
-- by pacer.capacity.
--
-- An entry is immutable message data: id, v (verification), to (phone),
-- e (expiry, Redis ms), sc (the verification's field in the phone's hash),
-- p (price reserved, -1 none), t (Redis time of that reservation), k (the
-- cap windows it was counted in), pk (the phone's hash, where the
-- verification lives). What changes lives in the message's
-- hash otp:msg:<id> (24 h): s (state), d (detail), pid (provider id), n
-- (attempts), a (the issuing API key), o (the consumer that ended it), and
-- the money fields of reserve.lua and refund.lua.
--
-- KEYS[1] the stream; KEYS[2] the holds (claim) or the message's hash;
-- KEYS[3] (end only) the callers' shares otp:share (issue.lua, "Shares")
-- ARGV[1] op, ARGV[2] this instance's consumer name
--
-- claim: ARGV want, takeover_ms, mode ('own': this consumer's pending
--   entries after the cursor, any idle: at start, and after a claim whose
--   reply was lost; 'takeover': entries idle >= takeover_ms of any
--   consumer, from XAUTOCLAIM's cursor; 'new': never delivered), cursor.
--   Returns {depth, cursor, n, then 14 per entry: entry id, id, v,
--   to, e, sc, p, t, k, pk, x, r, pl, deliveries}.
-- touch: ARGV entry ids: resets their idle time while this consumer still
--   owns them (so they are not taken over); returns the ones it lost.
-- end: ARGV entry id, state (sent, failed, expired), detail, provider id:
--   while this consumer owns the entry, the message ends (and leaves its
--   caller's share), and its hash records this consumer as the one that
--   ended it (o: refund.lua gives back money only to that consumer);
--   returns 1, or 0 when it had ended already (by a delivery report, an
--   abandon, or this consumer's own end whose reply was lost). Returns -1
--   when another consumer owns the entry or ended it (a takeover): nothing
--   changes, so a partitioned instance never ends, nor refunds, what
--   another sends. Only a 'sent' is still written then (the entry and the
--   share stay the owner's), so the owner does not send it again.
-- retry: ARGV entry id, detail: back to 'queued' while this consumer owns
--   it; returns 1, or 0 when it lost it (another instance took it over).
--   A final state written meanwhile (an old owner's 'sent', a delivery
--   report) stays: the next slot ends the message.
-- own: ARGV entry id: while this consumer owns the entry, it becomes the
--   one that may give the message's money back (o, as an end writes it),
--   so a failover gives back a reservation no call was written on before
--   it moves the message; returns 1, or 0 when another consumer owns it.
-- move: KEYS[3] another provider's stream, KEYS[4] the callers' shares;
--   ARGV entry id, then the entry's
--   id, v, to, e, sc, p, t, k, pk, x, r (the latest reservation: the next
--   attempt takes a later one), pl (the providers it went to), detail, the
--   provider: a failover, while this consumer owns the entry and the
--   message has not ended: the entry leaves this stream and its copy joins
--   the other in the same step (so it is never in two queues, nor on two
--   providers' wires), and the hash says queued for that provider (pv).
--   Returns 1 moved, 2 it had ended (its entry leaves, as an end's; nothing
--   moved), 0 another consumer owns it, {3, ms}: another consumer armed it
--   and its call may be on a wire for ms more (own answers the same): a
--   code is never on two providers' wires at once; 4: the other provider's
--   queue holds its capacity (ARGV after the attempt) already.
-- depth: returns the fleet's queue (stream and holds).
-- import: ARGV id, v, to, e, a, p, t, k: a message a ledger of a version
--   before the fleet holds as queued (its queue was the process's own):
--   added to the stream once, unless Redis knows the message already.
--   It names no verification field (sc ''), so slot.lua does not check
--   its verification. Returns 1 when added.
-- get: returns {api key, state, pv, ah} ("" when unknown): pv the provider
--   that has it or sent it, ah its attempts ("alpha:timeout,beta:accepted").
-- end, retry and move take one more ARGV, last: the attempt just made, as
--   "<provider>:<cause>" ('' for none), appended to ah (at most 480 bytes).
-- states: KEYS[2..] message hashes: returns {s, d} of each ('' when unknown),
--   for the ledger's sweep of messages another instance ended.
-- report: ARGV state (delivered, failed): a delivery report moves a message
--   that is queued (a retry), sending or sent; returns {1, pv} (the provider
--   that had it), or {0, ''} when it did not move.
local q, G = KEYS[1], 'senders'
local op, me = ARGV[1], ARGV[2]
local FINAL = {sent = true, delivered = true, failed = true, expired = true}

local function group()
  if redis.call('EXISTS', q) == 0 then redis.call('XGROUP', 'CREATE', q, G, '0', 'MKSTREAM') end
end

-- The consumer that owns entry eid, or nil.
local function owner(eid)
  local p = redis.call('XPENDING', q, G, eid, eid, 1)
  return p[1] and p[1][2] or nil
end

if op == 'claim' then
  local want, takeover, mode, cursor = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6]
  group()
  local out = {redis.call('XLEN', q) + redis.call('ZCARD', KEYS[2]), cursor, 0}
  local entries = {}
  if mode == 'own' then
    local from = cursor == '0-0' and '-' or '(' .. cursor
    local p = redis.call('XPENDING', q, G, from, '+', want, me)
    local ids = {}
    for _, e in ipairs(p) do ids[#ids + 1] = e[1] end
    out[2] = #ids == want and ids[#ids] or '0-0'
    if #ids > 0 then entries = redis.call('XCLAIM', q, G, me, 0, unpack(ids)) end
  elseif mode == 'takeover' then
    local r = redis.call('XAUTOCLAIM', q, G, me, takeover, cursor, 'COUNT', want)
    out[2], entries = r[1], r[2]
  else
    local r = redis.call('XREADGROUP', 'GROUP', G, me, 'COUNT', want, 'STREAMS', q, '>')
    if r then entries = r[1][2] end
  end
  for _, e in ipairs(entries) do
    if e and e[2] then
      local f = {}
      for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
      local p = redis.call('XPENDING', q, G, e[1], e[1], 1)
      out[3] = out[3] + 1
      out[#out + 1] = e[1]
      for _, name in ipairs({'id', 'v', 'to', 'e', 'sc', 'p', 't', 'k', 'pk', 'x', 'r', 'pl'}) do
        out[#out + 1] = f[name] or ''
      end
      out[#out + 1] = p[1] and p[1][4] or 1
    end
  end
  return out
end

if op == 'touch' then
  local lost = {}
  for i = 3, #ARGV do
    if owner(ARGV[i]) == me then
      redis.call('XCLAIM', q, G, me, 0, ARGV[i], 'JUSTID')
    else
      lost[#lost + 1] = ARGV[i]
    end
  end
  return lost
end

-- Appends attempt a ("<provider>:<cause>") to the message's history.
local function attempt(a)
  if not a or a == '' then return end
  local ah = redis.call('HGET', KEYS[2], 'ah')
  if ah and #ah + #a > 480 then return end
  redis.call('HSET', KEYS[2], 'ah', ah and (ah .. ',' .. a) or a)
end

-- The entry a sent message kept (end), as a table of its fields.
local function kept_entry()
  local en = redis.call('HGET', KEYS[2], 'en')
  if not en then return nil end
  local flat, f = cjson.decode(en), {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  return f, flat
end

if op == 'end' then
  local function write()
    redis.call('HSET', KEYS[2], 's', ARGV[4], 'd', ARGV[5])
    if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], 'pid', ARGV[6]) end
    attempt(ARGV[7])
  end
  local m = redis.call('HMGET', KEYS[2], 's', 'o')
  local s, own = m[1], owner(ARGV[3])
  if own ~= me then
    if not own and m[2] == me then return 0 end -- ended here; its reply was lost
    if ARGV[4] == 'sent' and s and not FINAL[s] then write() end
    return -1
  end
  redis.call('HSET', KEYS[2], 'o', me)
  redis.call('PEXPIRE', KEYS[2], 86400000)
  -- A sent message keeps its entry (en) in its hash: a failed delivery
  -- report may queue it again on the next provider of its route (again).
  local en = ARGV[4] == 'sent' and redis.call('XRANGE', q, ARGV[3], ARGV[3])[1]
  redis.call('XACK', q, G, ARGV[3])
  redis.call('XDEL', q, ARGV[3])
  if en and not (s and FINAL[s]) then redis.call('HSET', KEYS[2], 'en', cjson.encode(en[2])) end
  -- Also when it had ended already (an abandon after its commit): ZREM of
  -- a member gone is nothing, so the share is given back exactly once.
  local sh = KEYS[3] and redis.call('HGET', KEYS[2], 'sh')
  if sh then redis.call('ZREM', KEYS[3], sh) end
  if s and FINAL[s] then return 0 end
  write()
  return 1
end

-- The ms until another consumer's call of this message can no longer be
-- on a wire (0: none can): it armed it ('sending', ao) until w.
local function wire_wait()
  local m = redis.call('HMGET', KEYS[2], 's', 'ao', 'w')
  if m[1] ~= 'sending' or not m[2] or m[2] == me then return 0 end
  local t = redis.call('TIME')
  local left = tonumber(m[3] or '0') - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  return left > 0 and left or 0
end

if op == 'own' then
  if owner(ARGV[3]) ~= me then return 0 end
  local wait = wire_wait()
  if wait > 0 then return {3, wait} end
  redis.call('HSET', KEYS[2], 'o', me)
  return 1
end

if op == 'move' then
  if owner(ARGV[3]) ~= me then return 0 end
  if FINAL[redis.call('HGET', KEYS[2], 's')] then
    -- Ended meanwhile (a delivery report, an old owner's 'sent'): its entry
    -- leaves as an end's does, and this consumer is the one that may give
    -- back what it holds unspent.
    redis.call('XACK', q, G, ARGV[3])
    redis.call('XDEL', q, ARGV[3])
    local sh = redis.call('HGET', KEYS[2], 'sh')
    if sh then redis.call('ZREM', KEYS[4], sh) end
    redis.call('HSET', KEYS[2], 'o', me)
    return 2
  end
  local wait = wire_wait()
  if wait > 0 then return {3, wait} end
  local to = KEYS[3]
  if redis.call('XLEN', to) >= tonumber(ARGV[19]) then return 4 end
  if redis.call('EXISTS', to) == 0 then redis.call('XGROUP', 'CREATE', to, G, '0', 'MKSTREAM') end
  redis.call('XACK', q, G, ARGV[3])
  redis.call('XDEL', q, ARGV[3])
  local f = {}
  for i, name in ipairs({'id', 'v', 'to', 'e', 'sc', 'p', 't', 'k', 'pk', 'x', 'r', 'pl'}) do
    f[#f + 1] = name
    f[#f + 1] = ARGV[3 + i]
  end
  redis.call('XADD', to, '*', unpack(f))
  redis.call('HSET', KEYS[2], 's', 'queued', 'd', ARGV[16], 'pv', ARGV[17])
  attempt(ARGV[18])
  redis.call('PEXPIRE', KEYS[2], 86400000)
  return 1
end

-- lanes: KEYS[1] the set of every provider's stream (otp:lanes); ARGV the
--   streams of this instance's providers: they join the set; returns the
--   set's others, and otp:q when it is not among them and exists (a single
--   provider's before the network): streams no provider of this config
--   reads, whose messages are adopted.
if op == 'lanes' then
  local mine = {}
  for i = 3, #ARGV do
    mine[ARGV[i]] = true
    redis.call('SADD', q, ARGV[i])
  end
  local out = {}
  for _, s in ipairs(redis.call('SMEMBERS', q)) do
    if not mine[s] and redis.call('EXISTS', s) == 1 then out[#out + 1] = s end
  end
  if not mine['otp:q'] and redis.call('SISMEMBER', q, 'otp:q') == 0 and redis.call('EXISTS', 'otp:q') == 1 then
    out[#out + 1] = 'otp:q'
  end
  return out
end

-- peek: ARGV cursor (an entry id, '0-0' first): up to 32 entries after it,
--   {eid, id, to} each.
if op == 'peek' then
  local out = {}
  local from = ARGV[3] == '0-0' and '-' or '(' .. ARGV[3]
  for _, e in ipairs(redis.call('XRANGE', q, from, '+', 'COUNT', 32)) do
    local f = {}
    for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
    out[#out + 1] = e[1]
    out[#out + 1] = f['id'] or ''
    out[#out + 1] = f['to'] or ''
  end
  return out
end

if op == 'retry' then
  if owner(ARGV[3]) ~= me then return 0 end
  if not FINAL[redis.call('HGET', KEYS[2], 's')] then redis.call('HSET', KEYS[2], 's', 'queued', 'd', ARGV[4]) end
  attempt(ARGV[5])
  return 1
end

if op == 'import' then
  if redis.call('HEXISTS', KEYS[2], 's') == 1 then return 0 end
  group()
  redis.call('HSET', KEYS[2], 's', 'queued', 'a', ARGV[7], 'n', 0)
  if tonumber(ARGV[8]) >= 0 then redis.call('HSET', KEYS[2], 'p', ARGV[8], 't', ARGV[9], 'k', ARGV[10]) end
  redis.call('PEXPIRE', KEYS[2], 86400000)
  redis.call('XADD', q, '*', 'id', ARGV[3], 'v', ARGV[4], 'to', ARGV[5], 'e', ARGV[6], 'sc', '',
             'p', ARGV[8], 't', ARGV[9], 'k', ARGV[10], 'pk', '')
  return 1
end

-- adopt: KEYS[3] a stream this config's provider reads, KEYS[4] the
--   shares; ARGV entry id, takeover_ms, that provider: an entry of a stream
--   no provider reads any more (a provider removed) moves there, as a
--   failover does, when no consumer holds it or its holder has been silent
--   for takeover_ms (and no call of it can be on a wire); its reservation
--   is restored there as a takeover's is (r -1). Returns 1 moved, 2 ended
--   (its entry left), 3 not now, 0 gone.
if op == 'adopt' then
  local e = redis.call('XRANGE', q, ARGV[3], ARGV[3])
  if not e[1] then return 0 end
  group()
  local p = redis.call('XPENDING', q, G, ARGV[3], ARGV[3], 1)
  if p[1] and p[1][2] ~= me and tonumber(p[1][3]) < tonumber(ARGV[4]) then return 3 end
  if wire_wait() > 0 then return 3 end
  redis.call('XACK', q, G, ARGV[3])
  redis.call('XDEL', q, ARGV[3])
  if FINAL[redis.call('HGET', KEYS[2], 's')] then
    local sh = redis.call('HGET', KEYS[2], 'sh')
    if sh then redis.call('ZREM', KEYS[4], sh) end
    return 2
  end
  local to = KEYS[3]
  if redis.call('EXISTS', to) == 0 then redis.call('XGROUP', 'CREATE', to, G, '0', 'MKSTREAM') end
  local f = e[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'r' then f[i + 1] = '-1' end
  end
  local has_r = false
  for i = 1, #f, 2 do has_r = has_r or f[i] == 'r' end
  if not has_r then f[#f + 1] = 'r'; f[#f + 1] = '-1' end
  redis.call('XADD', to, '*', unpack(f))
  redis.call('HSET', KEYS[2], 's', 'queued', 'pv', ARGV[5])
  redis.call('PEXPIRE', KEYS[2], 86400000)
  return 1
end

-- again: KEYS[1] the next provider's stream; ARGV the provider, the failed
--   attempt ("<provider>:<cause>"), the detail: a sent message whose
--   delivery failed, queued again there with the same entry (its code is
--   the same), its latest reservation spent (r: the next attempt reserves
--   at that provider's price) and the provider added to pl. Returns 1, or 0
--   when it is no longer a sent message that kept its entry.
if op == 'again' then
  local m = redis.call('HMGET', KEYS[2], 's', 'pv', 'r')
  local f, flat = kept_entry()
  if m[1] ~= 'sent' or not f then return 0 end
  local tried = (f.pl and f.pl ~= '') and (f.pl .. ',' .. (m[2] or 'default')) or (m[2] or 'default')
  local out = {}
  for i = 1, #flat, 2 do
    if flat[i] ~= 'r' and flat[i] ~= 'pl' then
      out[#out + 1] = flat[i]
      out[#out + 1] = flat[i + 1]
    end
  end
  out[#out + 1] = 'r'
  out[#out + 1] = m[3] or '1'
  out[#out + 1] = 'pl'
  out[#out + 1] = tried
  group()
  redis.call('XADD', q, '*', unpack(out))
  redis.call('HDEL', KEYS[2], 'en')
  redis.call('HSET', KEYS[2], 's', 'queued', 'pv', ARGV[3], 'd', ARGV[5])
  attempt(ARGV[4])
  return 1
end

if op == 'depth' then
  return redis.call('XLEN', q) + redis.call('ZCARD', KEYS[2])
end

if op == 'get' then
  local m = redis.call('HMGET', KEYS[2], 'a', 's', 'pv', 'ah')
  if m[2] == 'held' then return {'', '', '', ''} end
  return {m[1] or '', m[2] or '', m[3] or '', m[4] or ''}
end

if op == 'report' then
  local s = redis.call('HGET', KEYS[2], 's')
  -- 'queued' too: a retry may wait after a call whose verdict was lost
  -- (a timeout) but which the provider took; the report ends it unsent again.
  if s ~= 'queued' and s ~= 'sending' and s ~= 'sent' then return {0, ''} end
  -- A failed report of a sent message with min_life_ms (ARGV[4]) of its
  -- code's life left: {2, pv, to, pl}, nothing changed (the caller picks
  -- the next provider and queues it there: again, or reports it failed).
  local min_life = tonumber(ARGV[4] or '')
  if ARGV[3] == 'failed' and s == 'sent' and min_life then
    local f = kept_entry()
    local t = redis.call('TIME')
    if f and tonumber(f.e) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) >= min_life then
      return {2, redis.call('HGET', KEYS[2], 'pv') or '', f.to or '', f.pl or ''}
    end
  end
  redis.call('HSET', KEYS[2], 's', ARGV[3])
  return {1, redis.call('HGET', KEYS[2], 'pv') or ''}
end

if op == 'states' then
  local out = {}
  for i = 2, #KEYS do
    local m = redis.call('HMGET', KEYS[i], 's', 'd')
    out[#out + 1] = m[1] or ''
    out[#out + 1] = m[2] or ''
  end
  return out
end

return redis.error_reply('queue.lua: unknown op ' .. tostring(op))
