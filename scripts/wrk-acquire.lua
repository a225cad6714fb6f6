-- The acquire workload of scripts/bench-wrk and scripts/bench-instructions --cpu: a POST of a
-- random resource among 10,000, a random owner and a 50 ms TTL (redis-benchmark's
-- `SET lock:__rand_int__ tok NX PX 50`), so most acquires are grants.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
request = function()
  local r = math.random(0, 9999)
  local body = string.format('{"owner":"w%d","ttl_ms":50}', math.random(0, 1000000))
  return wrk.format(nil, "/locks/lock:" .. r, nil, body)
end
