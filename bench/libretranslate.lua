-- wrk's script for bench/serve_load.py: LibreTranslate requests of one sentence each,
-- cycling through the lines of the file given after "--", and at the end one line
-- "WRK {json}" with the requests, their latency percentiles and the answers by status.
--
--     wrk -t1 -c64 -d20s -s bench/libretranslate.lua http://127.0.0.1:8000/translate -- FILE

local lines, next_line, threads = {}, 0, {}
statuses = {}  -- a global: done() reads each thread's with thread:get

local function escape(text)  -- a JSON string's body (UTF-8 passes through as it is)
  text = text:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' end
    if c == "\\" then return "\\\\" end
    return string.format("\\u%04x", string.byte(c))
  end)
  return text
end

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do
    lines[#lines + 1] = '{"q":"' .. escape(line) .. '","source":"de","target":"en"}'
  end
  if #lines == 0 then error("no sentences in " .. args[1]) end
end

function request()
  next_line = next_line % #lines + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, lines[next_line])
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local counts = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      counts[status] = (counts[status] or 0) + n
    end
  end
  local parts = {}
  for status, n in pairs(counts) do
    parts[#parts + 1] = string.format('"%d":%d', status, n)
  end
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,'
      .. '"connect":%d,"read":%d,"write":%d,"timeout":%d,"statuses":{%s}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.timeout, table.concat(parts, ",")))
end
