-- The Mandelbrot kernel of examples/mandelbrot/rows.luau on LuaJIT, its rows cut into 64 chunks
-- run on luv's thread pool (libuv's work queue; UV_THREADPOOL_SIZE sets its threads: mandelbrot.sh
-- sets 2). Prints the image's byte sum, which examples/mandelbrot_pool.luau prints too.
--
--   UV_THREADPOOL_SIZE=2 luajit benches/peers/mandelbrot_luv.lua [WIDTH HEIGHT MAXITER]

local uv = require("luv")

local WIDTH = tonumber(arg[1]) or 800
local HEIGHT = tonumber(arg[2]) or 600
local MAXITER = tonumber(arg[3]) or 200
local CHUNKS = math.min(HEIGHT, 64)
local SPAN = math.max(3.5, 2.4 * WIDTH / HEIGHT)

-- Runs in a pool thread's own Lua state: everything it needs comes in as arguments.
local function rows(width, height, maxIter, span, first, last)
	local INSIDE, ESCAPE, LOG2 = 0, 256, math.log(2)
	local floor, log, sqrt, max, min, char = math.floor, math.log, math.sqrt, math.max, math.min, string.char
	local step = span / width
	local left = -0.75 - step * (width - 1) / 2
	local top = 0 + step * (height - 1) / 2
	local out = {}
	for row = first, last do
		local ci = top - (row - 1) * step
		for col = 0, width - 1 do
			local cr = left + col * step
			local zr, zi, zr2, zi2 = 0, 0, 0, 0
			local n = 0
			while n < maxIter and zr2 + zi2 <= ESCAPE do
				zi = 2 * zr * zi + ci
				zr = zr2 - zi2 + cr
				zr2 = zr * zr
				zi2 = zi * zi
				n = n + 1
			end
			local index = INSIDE
			if n < maxIter then
				local smooth = n + 1 - log(log(zr2 + zi2) / 2) / LOG2
				local t = sqrt(max(smooth, 0) / maxIter)
				index = 1 + floor(254 * min(t, 1) + 0.5)
			end
			out[#out + 1] = char(index)
		end
	end
	return first, table.concat(out)
end

local parts, done = {}, 0
local work = uv.new_work(rows, function(first, bytes)
	parts[first] = bytes
	done = done + 1
end)
local base, extra = math.floor(HEIGHT / CHUNKS), HEIGHT % CHUNKS
local first = 1
for index = 1, CHUNKS do
	local len = base + (index <= extra and 1 or 0)
	work:queue(WIDTH, HEIGHT, MAXITER, SPAN, first, first + len - 1)
	first = first + len
end
uv.run()
assert(done == CHUNKS, "a chunk did not come back")

local sum, total = 0, 0
for f = 1, HEIGHT do
	local bytes = parts[f]
	if bytes then
		for i = 1, #bytes do sum = sum + bytes:byte(i) end
		total = total + #bytes
	end
end
assert(total == WIDTH * HEIGHT)
print(string.format("mandelbrot %dx%d, %d iterations: byte sum %d", WIDTH, HEIGHT, MAXITER, sum))
