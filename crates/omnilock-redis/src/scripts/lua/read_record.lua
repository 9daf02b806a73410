-- A record (`scripts/records.rs`) as one moment sees it, changing nothing.
-- KEYS: the record. Answers its value and PTTL, or '' and -2 when there is
-- none (no boolean: a RESP3 connection would get one as is).
local value = redis.call('GET', KEYS[1])
if not value then return {'', -2} end
return {value, redis.call('PTTL', KEYS[1])}
