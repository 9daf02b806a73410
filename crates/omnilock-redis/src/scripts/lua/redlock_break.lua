
local state = lock_state(KEYS[1])
pass_on(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
if state == 'h' then return 1 end
return 0
