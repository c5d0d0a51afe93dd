package redisstore

import "github.com/redis/go-redis/v9"

// prelude is shared by the scripts: number formatting that never goes to
// exponent notation, and the record and event codecs (see codec.go for the
// formats).
const prelude = `
local function s(n) return string.format('%d', n) end
local function pad(r) return string.format('%020d', r) end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse_record(v)
  local nl = string.find(v, '\n', 1, true)
  local c, m, ver = string.match(string.sub(v, 1, nl - 1), '^(%d+),(%d+),(%d+)$')
  return tonumber(c), tonumber(m), tonumber(ver)
end
local function event_key(v)
  local nl = string.find(v, '\n', 1, true)
  local typ, klen = string.match(string.sub(v, 1, nl - 1), '^(%a),.*,(%d+)$')
  return typ, string.sub(v, nl + 1, nl + tonumber(klen))
end
local function event_time(v)
  local nl = string.find(v, '\n', 1, true)
  local ms = string.match(string.sub(v, 1, nl - 1), '^%a,%d+,%d+,%d+,%d+,(%d+),%d+$')
  return tonumber(ms)
end
-- rolled_back checks that the store did not go back in time for a
-- replica that handed out revisions up to hw and knows the data set by
-- the incarnation expected: it returns nil when the replica may go on, or
-- the fault {head, highest handed out, expected, found}, which it records
-- in the fault hash (so that every replica refuses writes until an
-- operator accepts it). A changed incarnation is no fault when it began
-- (an acceptance) at or above hw: nothing this replica handed out can
-- come again.
local function rolled_back(inc_key, fault_key, rev, hw, expected, who, now)
  local found = redis.call('GET', inc_key) or ''
  local f = redis.call('HMGET', fault_key, 'head', 'highest', 'expected', 'found')
  if f[1] then
    if hw > tonumber(f[2]) then
      redis.call('HSET', fault_key, 'highest', s(hw))
      f[2] = s(hw)
    end
    return f
  end
  local ok = rev >= hw
  if ok and found ~= expected then
    ok = tonumber(string.match(found, ':(%d+)$') or '0') >= hw
  end
  if ok then return nil end
  redis.call('HSET', fault_key, 'head', s(rev), 'highest', s(hw), 'expected', expected, 'found', found, 'by', who, 'at', s(now))
  return {s(rev), s(hw), expected, found}
end
-- quota_admit decides a write of cost bytes against the quota (0: none)
-- and the NOSPACE alarm (see store.Quota.Admit), reserved ('1') when it
-- may use the reserve: it returns nil to admit it, or the refusal
-- {'QUOTA', used, cost, refused only for the alarm 1|0}, raising the
-- alarm at or over the low-water mark (nine tenths of the quota). A size
-- under the low-water mark clears the alarm first.
local function quota_admit(bytes_key, alarm_key, quota, reserve, reserved, cost, now)
  if quota <= 0 then return nil end
  local used = tonumber(redis.call('GET', bytes_key) or '0')
  local alarmed = redis.call('EXISTS', alarm_key) == 1
  local low = quota - math.floor(quota / 10)
  if alarmed and used < low then
    redis.call('DEL', alarm_key)
    alarmed = false
  end
  if cost <= 0 then return nil end
  local limit = quota
  if reserved == '1' then limit = quota + reserve end
  local fits = used + cost <= limit
  if fits and (reserved == '1' or not alarmed) then return nil end
  if not alarmed and used >= low then redis.call('HSET', alarm_key, 'since', s(now), 'used', s(used)) end
  local only = '0'
  if fits then only = '1' end
  return {'QUOTA', s(used), s(cost), only}
end
-- quota_add counts delta bytes (negative: freed) and settles the alarm:
-- raised at or over the quota, cleared under the low-water mark.
local function quota_add(bytes_key, alarm_key, quota, delta, now)
  local used = redis.call('INCRBY', bytes_key, s(delta)) -- s: never "-0", which INCRBY refuses
  if quota <= 0 then return end
  if used >= quota then
    if redis.call('HSETNX', alarm_key, 'since', s(now)) == 1 then redis.call('HSET', alarm_key, 'used', s(used)) end
  elseif used < quota - math.floor(quota / 10) then
    redis.call('DEL', alarm_key)
  end
end
local function fenced(lease, token, now)
  if token == '' then return false end
  local cur = redis.call('HMGET', lease, 'token', 'expires')
  return cur[1] ~= token or tonumber(cur[2] or '0') < now
end
`

// mutateScript commits puts and deletes atomically, after the compares,
// the unchanged conditions and (for a single put or delete) its own
// expectation hold; it appends each change to the log and publishes the
// new revision.
//
//	KEYS: rev, compact, kv, keys, idx, log, fence lease, incarnation, fault,
//	      bytes, alarm
//	ARGV: channel, fence token ("" for none), mode ("single" or "txn"),
//	      highest revision the replica handed out, incarnation it knows,
//	      replica name, quota, reserve, may use the reserve 1|0, cost,
//	      ncompares, (key, expected mod revision)...,
//	      nunchanged, (prefix, since)...,
//	      nops, (P|D, key, value, has expectation 1|0, expected)...
//
// It returns {"OK", revision, previous record or false} or a refusal:
// {"MISMATCH", key, expected, actual}, {"CHANGED", prefix, since, key,
// revision}, {"NOTFOUND", key, revision}, {"FENCED"}, {"ROLLEDBACK",
// head, highest, expected, found} (see rolled_back), {"QUOTA", ...} (see
// quota_admit). The bytes it adds or frees are counted in bytes.
var mutateScript = redis.NewScript(prelude + `
local now = now_ms()
if fenced(KEYS[7], ARGV[2], now) then return {'FENCED'} end
local rev = tonumber(redis.call('GET', KEYS[1]) or '0')
local fault = rolled_back(KEYS[8], KEYS[9], rev, tonumber(ARGV[4]), ARGV[5], ARGV[6], now)
if fault then return {'ROLLEDBACK', fault[1], fault[2], fault[3], fault[4]} end
local quota = tonumber(ARGV[7])
local refused = quota_admit(KEYS[10], KEYS[11], quota, tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10]), now)
if refused then return refused end
local compact = tonumber(redis.call('GET', KEYS[2]) or '0')
local i = 11
local nc = tonumber(ARGV[i]); i = i + 1
for c = 1, nc do
  local key, expect = ARGV[i], tonumber(ARGV[i + 1]); i = i + 2
  local cur = redis.call('HGET', KEYS[3], key)
  local actual = 0
  if cur then local _, m = parse_record(cur); actual = m end
  if actual ~= expect then return {'MISMATCH', key, s(expect), s(actual)} end
end
local nu = tonumber(ARGV[i]); i = i + 1
local conds = {}
local since_min = rev
for u = 1, nu do
  local prefix, since = ARGV[i], tonumber(ARGV[i + 1]); i = i + 2
  if since < compact then return {'CHANGED', prefix, s(since), '', s(compact)} end
  conds[#conds + 1] = {prefix, since}
  if since < since_min then since_min = since end
end
if nu > 0 then
  for r = since_min + 1, rev do
    local ev = redis.call('HGET', KEYS[6], s(r))
    if ev then
      local _, key = event_key(ev)
      for _, cnd in ipairs(conds) do
        if r > cnd[2] and string.sub(key, 1, #cnd[1]) == cnd[1] then
          return {'CHANGED', cnd[1], s(cnd[2]), key, s(r)}
        end
      end
    end
  end
end
local nops = tonumber(ARGV[i]); i = i + 1
local ops = {}
for o = 1, nops do
  ops[o] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])}
  i = i + 5
end
local prev = false
if ARGV[3] == 'single' then
  local op = ops[1]
  local cur = redis.call('HGET', KEYS[3], op[2])
  local actual = 0
  if cur then local _, m = parse_record(cur); actual = m end
  if op[4] == '1' and actual ~= op[5] then return {'MISMATCH', op[2], s(op[5]), s(actual)} end
  if op[1] == 'D' and not cur then return {'NOTFOUND', op[2], s(rev)} end
  if cur then prev = cur end
end
-- A transaction's delete of an absent key is skipped: it takes no revision.
local todo = {}
for _, op in ipairs(ops) do
  if ARGV[3] == 'single' or op[1] == 'P' or redis.call('HEXISTS', KEYS[3], op[2]) == 1 then
    todo[#todo + 1] = op
  end
end
if #todo == 0 then return {'OK', s(rev), prev} end
local delta = 0
for o, op in ipairs(todo) do
  rev = rev + 1
  -- A lower-case type marks a change that more of its transaction follows.
  local pt, dt = 'P', 'D'
  if o < #todo then pt, dt = 'p', 'd' end
  local key = op[2]
  local cur = redis.call('HGET', KEYS[3], key)
  local create, prevmod, ver = 0, 0, 0
  if cur then
    create, prevmod, ver = parse_record(cur)
    delta = delta - #key - #cur
  end
  local ev
  if op[1] == 'P' then
    if not cur then create = rev; ver = 0; delta = delta + #key end
    ver = ver + 1
    local rec = s(create) .. ',' .. s(rev) .. ',' .. s(ver) .. '\n' .. op[3]
    redis.call('HSET', KEYS[3], key, rec)
    redis.call('ZADD', KEYS[4], 0, key)
    delta = delta + #key + #rec
    ev = pt .. ',' .. s(create) .. ',' .. s(rev) .. ',' .. s(ver) .. ',' .. s(prevmod) .. ',' .. s(now) .. ',' .. s(#key) .. '\n' .. key .. op[3]
  else
    redis.call('HDEL', KEYS[3], key)
    redis.call('ZREM', KEYS[4], key)
    delta = delta - #key
    ev = dt .. ',0,' .. s(rev) .. ',0,' .. s(prevmod) .. ',' .. s(now) .. ',' .. s(#key) .. '\n' .. key
  end
  redis.call('HSET', KEYS[6], s(rev), ev)
  local member = key .. '\0' .. pad(rev)
  redis.call('ZADD', KEYS[5], 0, member)
  delta = delta + #s(rev) + #ev + #member
end
quota_add(KEYS[10], KEYS[11], quota, delta, now)
redis.call('SET', KEYS[1], s(rev))
redis.call('PUBLISH', ARGV[1], s(rev))
return {'OK', s(rev), prev}
`)

// statusScript reads the current and compact revisions together.
//
//	KEYS: rev, compact
var statusScript = redis.NewScript(`
return {redis.call('GET', KEYS[1]) or '0', redis.call('GET', KEYS[2]) or '0'}
`)

// getScript reads one key at a revision (0: current).
//
//	KEYS: rev, compact, kv, idx, log
//	ARGV: key, revision
//
// It returns {"OK", revision read, "R" record | "E" event | "N" (absent)}
// or {"COMPACTED", requested, compact, current} / {"FUTURE", requested,
// current}.
var getScript = redis.NewScript(prelude + `
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local compact = tonumber(redis.call('GET', KEYS[2]) or '0')
local at = tonumber(ARGV[2])
if at == 0 then at = cur end
if at > cur then return {'FUTURE', s(at), s(cur)} end
if at < compact then return {'COMPACTED', s(at), s(compact), s(cur)} end
if at == cur then
  local v = redis.call('HGET', KEYS[3], ARGV[1])
  if v then return {'OK', s(at), 'R', v} end
  return {'OK', s(at), 'N'}
end
local m = redis.call('ZREVRANGEBYLEX', KEYS[4], '[' .. ARGV[1] .. '\0' .. pad(at), '[' .. ARGV[1] .. '\0', 'LIMIT', 0, 1)
if #m == 0 then return {'OK', s(at), 'N'} end
local r = tonumber(string.sub(m[1], #ARGV[1] + 2))
local ev = redis.call('HGET', KEYS[5], s(r))
if not ev or string.upper(string.sub(ev, 1, 1)) ~= 'P' then return {'OK', s(at), 'N'} end
return {'OK', s(at), 'E', ev}
`)

// listScript reads up to limit keys under a prefix, after a key, at a
// revision (0: current).
//
//	KEYS: rev, compact, kv, keys, idx, log
//	ARGV: prefix, after ("" for the first page), revision, limit
//
// It returns {"OK", revision read, more 0|1, kind "R"|"E", key1, value1,
// ...} where each value is a record (current revision) or a put event, or
// a refusal as getScript's.
var listScript = redis.NewScript(prelude + `
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local compact = tonumber(redis.call('GET', KEYS[2]) or '0')
local prefix, after, limit = ARGV[1], ARGV[2], tonumber(ARGV[4])
local at = tonumber(ARGV[3])
if at == 0 then at = cur end
if at > cur then return {'FUTURE', s(at), s(cur)} end
if at < compact then return {'COMPACTED', s(at), s(compact), s(cur)} end
local out = {'OK', s(at), '0'}
local start = '[' .. prefix
if after ~= '' and after >= prefix then start = '(' .. after end
local stop = '[' .. prefix .. '\255'
if at == cur then
  out[4] = 'R'
  local keys = redis.call('ZRANGEBYLEX', KEYS[4], start, stop, 'LIMIT', 0, limit + 1)
  if #keys > limit then out[3] = '1'; keys[#keys] = nil end
  if #keys > 0 then
    local vals = redis.call('HMGET', KEYS[3], unpack(keys))
    for j = 1, #keys do out[#out + 1] = keys[j]; out[#out + 1] = vals[j] end
  end
  return out
end
out[4] = 'E'
-- From the index: for each key, its last revision at or below at.
if after ~= '' and after >= prefix then start = '(' .. after .. '\0\255' end
local n = 0
while true do
  local m = redis.call('ZRANGEBYLEX', KEYS[5], start, stop, 'LIMIT', 0, 1)
  if #m == 0 then break end
  local sep = string.find(m[1], '\0', 1, true)
  local key = string.sub(m[1], 1, sep - 1)
  local last = redis.call('ZREVRANGEBYLEX', KEYS[5], '[' .. key .. '\0' .. pad(at), '[' .. key .. '\0', 'LIMIT', 0, 1)
  if #last > 0 then
    local r = string.sub(last[1], sep + 1)
    local ev = redis.call('HGET', KEYS[6], s(tonumber(r)))
    if ev and string.upper(string.sub(ev, 1, 1)) == 'P' then
      if n == limit then out[3] = '1'; break end
      out[#out + 1] = key; out[#out + 1] = ev
      n = n + 1
    end
  end
  start = '(' .. key .. '\0\255'
end
return out
`)

// changesFn is the body of changesScript as a Lua function, which
// feedScript shares.
const changesFn = `
local function changes(rev_key, compact_key, log_key, from, prefix, limit)
  local cur = tonumber(redis.call('GET', rev_key) or '0')
  local compact = tonumber(redis.call('GET', compact_key) or '0')
  if from <= compact then return {'COMPACTED', s(from), s(compact), s(cur)} end
  local to = math.min(cur, from + limit - 1)
  -- Never stop inside a transaction: read on to its last change.
  while to >= from and to < cur do
    local last = redis.call('HGET', log_key, s(to))
    if not last then break end
    local c = string.sub(last, 1, 1)
    if c ~= 'p' and c ~= 'd' then break end
    to = to + 1
  end
  local out = {'OK', s(math.max(to, from - 1))}
  if to < from then return out end
  local revs = {}
  for r = from, to do revs[#revs + 1] = s(r) end
  local evs = redis.call('HMGET', log_key, unpack(revs))
  for j = 1, #evs do
    local ev = evs[j]
    if not ev then return redis.error_reply('redisstore: revision ' .. revs[j] .. ' is missing from the log') end
    if prefix == '' then
      out[#out + 1] = ev
    else
      local _, key = event_key(ev)
      if string.sub(key, 1, #prefix) == prefix then out[#out + 1] = ev end
    end
  end
  return out
end
`

// changesScript reads the log from a revision, at most limit revisions,
// returning the events under a prefix.
//
//	KEYS: rev, compact, log
//	ARGV: from, prefix, limit
//
// It returns {"OK", through, event...} or {"COMPACTED", from, compact,
// current}.
var changesScript = redis.NewScript(prelude + changesFn + `
return changes(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]))
`)

// feedScript is the feed's read of the log: first the check that the
// store did not go back in time for this replica (rolled_back), then
// changesScript's read.
//
//	KEYS: rev, compact, log, incarnation, fault
//	ARGV: from, prefix, limit, highest revision handed out, incarnation
//	      known, replica name
//
// It returns {"ROLLEDBACK", head, highest, expected, found}, or the
// incarnation found followed by changesScript's answer.
var feedScript = redis.NewScript(prelude + changesFn + `
local rev = tonumber(redis.call('GET', KEYS[1]) or '0')
local fault = rolled_back(KEYS[4], KEYS[5], rev, tonumber(ARGV[4]), ARGV[5], ARGV[6], now_ms())
if fault then return {'ROLLEDBACK', fault[1], fault[2], fault[3], fault[4]} end
local out = changes(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]))
table.insert(out, 1, redis.call('GET', KEYS[4]) or '')
return out
`)

// openScript gives a data set its incarnation, once (an identity of the
// data set and the revision it began at, "id:revision"), and reads what a
// replica needs to start.
//
//	KEYS: rev, compact, incarnation, fault
//	ARGV: a new incarnation id
//
// It returns {revision, compact, incarnation, fault head or false,
// highest, expected, found}.
var openScript = redis.NewScript(prelude + `
local rev = redis.call('GET', KEYS[1]) or '0'
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. rev, 'NX')
local f = redis.call('HMGET', KEYS[4], 'head', 'highest', 'expected', 'found')
return {rev, redis.call('GET', KEYS[2]) or '0', redis.call('GET', KEYS[3]), f[1], f[2], f[3], f[4]}
`)

// acceptScript accepts a recorded fault: the store continues from what
// Redis holds, its revision counter and compact revision jump to one past
// the highest revision any replica reported handing out (J), so that no
// revision is handed out twice and every watcher is told to take a
// snapshot, the data set gets a new incarnation that begins at J, and a
// put of the marker key at J+1 records the acceptance in the change log
// (its value is the record). The log up to the old head must have been
// compacted before.
//
//	KEYS: rev, compact, incarnation, fault, kv, keys, idx, log, channel
//	ARGV: new incarnation id, marker key, replica name
//
// It returns {"NONE"} when no fault is recorded, or {"OK", old head,
// highest, J, expected, found}.
var acceptScript = redis.NewScript(prelude + `
local f = redis.call('HMGET', KEYS[4], 'head', 'highest', 'expected', 'found')
if not f[1] then return {'NONE'} end
local head = tonumber(redis.call('GET', KEYS[1]) or '0')
local j = math.max(head, tonumber(f[2])) + 1
local now = now_ms()
redis.call('SET', KEYS[2], s(j))
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. s(j))
redis.call('DEL', KEYS[4])
local rev = j + 1
local key = ARGV[2]
local value = '{"acceptedAt":' .. s(now) .. ',"head":' .. s(head) .. ',"highest":' .. f[2] .. ',"continuedAt":' .. s(j) ..
  ',"incarnation":"' .. f[3] .. '","found":"' .. f[4] .. '","by":"' .. ARGV[3] .. '"}'
local cur = redis.call('HGET', KEYS[5], key)
local create, prevmod, ver = rev, 0, 0
if cur then create, prevmod, ver = parse_record(cur) end
ver = ver + 1
redis.call('HSET', KEYS[5], key, s(create) .. ',' .. s(rev) .. ',' .. s(ver) .. '\n' .. value)
redis.call('ZADD', KEYS[6], 0, key)
redis.call('HSET', KEYS[8], s(rev), 'P,' .. s(create) .. ',' .. s(rev) .. ',' .. s(ver) .. ',' .. s(prevmod) .. ',' .. s(now) .. ',' .. s(#key) .. '\n' .. key .. value)
redis.call('ZADD', KEYS[7], 0, key .. '\0' .. pad(rev))
redis.call('SET', KEYS[1], s(rev))
redis.call('PUBLISH', KEYS[9], s(rev))
return {'OK', s(head), f[2], s(j), f[3], f[4]}
`)

// compactScript drops log entries up to a revision, at most max of them:
// for each compacted revision of a key, the key's previous entry, and the
// revision itself when it is a deletion. What stays at or below the
// compact revision is the last put of each key that exists there.
//
//	KEYS: rev, compact, idx, log, fence lease, bytes, alarm
//	ARGV: target, max, fence token, quota
//
// It returns {"OK", new compact} or {"FUTURE", target, current} or
// {"FENCED"}. The bytes it frees are counted off bytes.
var compactScript = redis.NewScript(prelude + `
local now = now_ms()
if fenced(KEYS[5], ARGV[3], now) then return {'FENCED'} end
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local compact = tonumber(redis.call('GET', KEYS[2]) or '0')
local target = tonumber(ARGV[1])
if target > cur then return {'FUTURE', s(target), s(cur)} end
if target <= compact then return {'OK', s(compact)} end
target = math.min(target, compact + tonumber(ARGV[2]))
local freed = 0
for r = compact + 1, target do
  local ev = redis.call('HGET', KEYS[4], s(r))
  if ev then
    local typ, key = event_key(ev)
    local prev = redis.call('ZREVRANGEBYLEX', KEYS[3], '(' .. key .. '\0' .. pad(r), '[' .. key .. '\0', 'LIMIT', 0, 1)
    if #prev > 0 then
      local pr = s(tonumber(string.sub(prev[1], #key + 2)))
      local pev = redis.call('HGET', KEYS[4], pr)
      redis.call('ZREM', KEYS[3], prev[1])
      redis.call('HDEL', KEYS[4], pr)
      freed = freed + #prev[1]
      if pev then freed = freed + #pr + #pev end
    end
    if string.upper(typ) == 'D' then
      local member = key .. '\0' .. pad(r)
      redis.call('ZREM', KEYS[3], member)
      redis.call('HDEL', KEYS[4], s(r))
      freed = freed + #member + #s(r) + #ev
    end
  end
end
quota_add(KEYS[6], KEYS[7], tonumber(ARGV[4]), -freed, now)
redis.call('SET', KEYS[2], s(target))
return {'OK', s(target)}
`)

// revisionAtScript finds the last revision committed at or before a time
// (milliseconds), by bisection over the retained log.
//
//	KEYS: rev, compact, log
//	ARGV: time in milliseconds
//
// It returns the revision, or the compact revision when none is that old.
var revisionAtScript = redis.NewScript(prelude + `
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local compact = tonumber(redis.call('GET', KEYS[2]) or '0')
local t = tonumber(ARGV[1])
local lo, hi = compact, cur
while lo < hi do
  local mid = math.floor((lo + hi + 1) / 2)
  local ev = redis.call('HGET', KEYS[3], s(mid))
  if ev and event_time(ev) <= t then lo = mid else hi = mid - 1 end
end
return s(lo)
`)

// leaseScript takes or renews a named lease for a holder: it succeeds when
// the lease is free, expired or the holder's, and the token grows each
// time the lease changes hands.
//
//	KEYS: lease
//	ARGV: holder, ttl in milliseconds
//
// It returns {held 0|1, token, holder}.
var leaseScript = redis.NewScript(prelude + `
local now = now_ms()
local cur = redis.call('HMGET', KEYS[1], 'holder', 'expires', 'token')
local holder, expires, token = cur[1], tonumber(cur[2] or '0'), cur[3] or '0'
if holder and holder ~= ARGV[1] and expires >= now then return {'0', token, holder} end
if holder ~= ARGV[1] or expires < now then token = s(redis.call('HINCRBY', KEYS[1], 'token', 1)) end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires', s(now + tonumber(ARGV[2])))
return {'1', token, ARGV[1]}
`)

// releaseLeaseScript gives a lease up if the holder still has it.
//
//	KEYS: lease
//	ARGV: holder
var releaseLeaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then redis.call('HSET', KEYS[1], 'expires', '0') end
return 1
`)

// seedBytesScript counts the bytes of a store's key space into its bytes
// key, when that key does not exist: a store written before its size was
// counted (blobs and records already there are not counted; those written
// from then on are). It reads the whole key space once, in one step.
//
//	KEYS: bytes, kv, keys, log, idx
//
// It returns the count, or false when bytes existed.
var seedBytesScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local n = 0
for _, k in ipairs({KEYS[2], KEYS[4]}) do
  for _, v in ipairs(redis.call('HGETALL', k)) do n = n + #v end
end
for _, k in ipairs({KEYS[3], KEYS[5]}) do
  for _, v in ipairs(redis.call('ZRANGE', k, 0, -1)) do n = n + #v end
end
redis.call('SET', KEYS[1], string.format('%d', n))
return n
`)

// usageScript reads the size and the alarm.
//
//	KEYS: bytes, alarm
//
// It returns {bytes, alarm since or false, alarm used or false}.
var usageScript = redis.NewScript(`
local a = redis.call('HMGET', KEYS[2], 'since', 'used')
return {redis.call('GET', KEYS[1]) or '0', a[1], a[2]}
`)
