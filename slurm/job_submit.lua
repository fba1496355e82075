--[[
vramkit job_submit plugin for Slurm (job_submit/lua, Slurm 22.05 and later).

Turns a GPU memory request into GRES shards, so that Slurm's own select/cons_tres places the job
on a GPU with that much memory left:

  sbatch --comment=vram=24GiB job.sh          -> --gres=shard:N, N = ceil(24 GiB / shard size)
  sbatch --comment=vram_plan=/shared/plan.json job.sh
                                              -> the plan's device_peak_bytes (vramkit plan --json)

A job that no GPU of the cluster can hold is refused at submission with a message. The request is
per GPU: Slurm hands a job's shards on a node out of one GPU.

Settings come from vramkit-slurm.conf (written by `vramkit slurm gres`), looked up as
$VRAMKIT_SLURM_CONF, then next to this file, then /etc/slurm/vramkit-slurm.conf:
  shard_bytes=1073741824      bytes per shard, the same on every node
  max_gpu_shards=132          shards of the largest GPU in the cluster

Install: install -m 644 slurm/job_submit.lua /etc/slurm/job_submit.lua, the settings file next to
it, and JobSubmitPlugins=lua in slurm.conf (see docs/cluster.md).
--]]

local vramkit = {}

-- Units as vramkit's parse_bytes reads them: K/M/G/T and KiB/MiB/GiB/TiB are binary, KB/MB/GB/TB
-- decimal, no unit or B is bytes.
local units = {
  [""] = 1, b = 1,
  k = 2^10, kib = 2^10, m = 2^20, mib = 2^20, g = 2^30, gib = 2^30, t = 2^40, tib = 2^40,
  kb = 1e3, mb = 1e6, gb = 1e9, tb = 1e12,
}

-- Bytes from "24GiB", "24 GiB", "1.5G", "80GB", "4096"; nil and a reason when it is not a size.
function vramkit.parse_bytes(text)
  local number, unit = string.match(text, "^%s*([%d%.]+)%s*(%a*)%s*$")
  if number == nil or tonumber(number) == nil then
    return nil, "'" .. text .. "' is not a size (e.g. 24GiB)"
  end
  local scale = units[string.lower(unit)]
  if scale == nil then
    return nil, "unknown unit '" .. unit .. "' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)"
  end
  return math.floor(tonumber(number) * scale + 0.5)
end

-- The directory of this script, from the chunk name slurmctld loaded it with.
local function script_dir()
  local info = debug.getinfo(1, "S")
  local source = info and info.source or ""
  if string.sub(source, 1, 1) ~= "@" then return nil end
  return string.match(string.sub(source, 2), "^(.*)/[^/]*$")
end

local function read_file(path)
  local f = io.open(path, "r")
  if f == nil then return nil end
  local text = f:read("*a")
  f:close()
  return text
end

-- shard_bytes and max_gpu_shards, or nil and a reason. Read at every submission, so a new file
-- takes effect without restarting slurmctld.
function vramkit.load_settings()
  local candidates = {}
  local env = os.getenv("VRAMKIT_SLURM_CONF")
  if env ~= nil and env ~= "" then table.insert(candidates, env) end
  local dir = script_dir()
  if dir ~= nil then table.insert(candidates, dir .. "/vramkit-slurm.conf") end
  table.insert(candidates, "/etc/slurm/vramkit-slurm.conf")
  for _, path in ipairs(candidates) do
    local text = read_file(path)
    if text ~= nil then
      local settings = {}
      for key, value in string.gmatch(text, "([%w_]+)%s*=%s*(%d+)") do
        settings[key] = tonumber(value)
      end
      if settings.shard_bytes == nil or settings.shard_bytes <= 0 then
        return nil, path .. " has no shard_bytes"
      end
      if settings.max_gpu_shards == nil or settings.max_gpu_shards <= 0 then
        return nil, path .. " has no max_gpu_shards"
      end
      settings.path = path
      return settings
    end
  end
  return nil, "no vramkit-slurm.conf found (looked in " .. table.concat(candidates, ", ") .. ")"
end

-- The per-GPU request in bytes named by a job comment, nil when it names none, or false and a reason.
function vramkit.request_from_comment(comment)
  if comment == nil then return nil end
  local padded = " " .. comment
  local size = string.match(padded, "[%s,;]vram=([^%s,;]+)")
  if size ~= nil then
    local bytes, why = vramkit.parse_bytes(size)
    if bytes == nil then return false, "vram=" .. size .. ": " .. why end
    if bytes <= 0 then return false, "vram= must be above zero" end
    return bytes
  end
  local plan = string.match(padded, "[%s,;]vram_plan=([^%s,;]+)")
  if plan ~= nil then
    local text = read_file(plan)
    if text == nil then
      return false, "cannot read the plan " .. plan .. " (it must be readable on the Slurm controller)"
    end
    local bytes = string.match(text, '"device_peak_bytes"%s*:%s*(%d+)')
    if bytes == nil then return false, plan .. " has no device_peak_bytes (expected vramkit plan --json output)" end
    bytes = tonumber(bytes)
    if bytes <= 0 then return false, plan .. ": device_peak_bytes must be above zero" end
    return bytes
  end
  return nil
end

local function human(bytes)
  if bytes >= 2^30 then return string.format("%.2f GiB", bytes / 2^30) end
  return string.format("%.2f MiB", bytes / 2^20)
end

-- Puts the plan itself (not rounded up to shards) into a batch job's environment as
-- VRAMKIT_PLANNED_BYTES, where `vramkit serve` reads it back to show used against planned.
-- Interactive jobs (srun, salloc) bring their environment from the client and have none here:
-- their plan is the cap the TaskProlog sets. Returns true when it was set.
function vramkit.set_planned(job_desc, bytes)
  local ok, env = pcall(function() return job_desc.environment end)
  if not ok or type(env) ~= "table" then return false end
  return (pcall(function() env.VRAMKIT_PLANNED_BYTES = string.format("%d", bytes) end))
end

-- Sets tres_per_node for a request, or returns an error text.
function vramkit.apply(job_desc)
  local bytes, why = vramkit.request_from_comment(job_desc.comment)
  if bytes == nil then return nil end
  if bytes == false then return "vramkit: " .. why end
  local settings, serr = vramkit.load_settings()
  if settings == nil then return "vramkit: cannot size the request: " .. serr end
  local shards = math.ceil(bytes / settings.shard_bytes)
  if shards > settings.max_gpu_shards then
    return string.format(
      "vramkit: the job needs %s per GPU (%d shards of %s), but the largest GPU in this cluster offers %d shards (%s): no GPU can hold it",
      human(bytes), shards, human(settings.shard_bytes), settings.max_gpu_shards,
      human(settings.max_gpu_shards * settings.shard_bytes))
  end
  -- --gpus, --gpus-per-task and --gpus-per-socket ask for whole GPUs through other fields; with a
  -- memory request Slurm would need both a gpu and shards of it, which it refuses with its generic
  -- "Invalid generic resource (gres) specification". Say so at submission instead.
  for _, field in ipairs({"tres_per_job", "tres_per_task", "tres_per_socket"}) do
    local value = job_desc[field]
    if value ~= nil and value ~= "" and string.find(value, "gpu", 1, true) then
      return "vramkit: vram= asks for GPU memory, --gpus/--gpus-per-task/--gpus-per-socket (" ..
        field .. "=" .. value .. ") for whole GPUs: give one of them, not both"
    end
  end
  local gres = "gres:shard:" .. shards
  local current = job_desc.tres_per_node
  if current ~= nil and current ~= "" then
    if string.find(current, "shard", 1, true) then
      return "vramkit: give either --comment=vram=... or --gres=shard:N, not both"
    end
    if string.find(current, "gpu", 1, true) then
      return "vramkit: a GPU is given out whole (--gres=gpu) or by memory (vram=), not both"
    end
    gres = current .. "," .. gres
  end
  job_desc.tres_per_node = gres
  vramkit.set_planned(job_desc, bytes)
  slurm.log_user("vramkit: %s per GPU -> %d shard(s) of %s (--gres=shard:%d)", human(bytes), shards,
                 human(settings.shard_bytes), shards)
  slurm.log_info("vramkit: job from uid %s: %s per GPU -> %s", tostring(job_desc.user_id), human(bytes), gres)
  return nil
end

-- Applies the request of job_desc; a refusal is told to the user and fails the call.
local function apply_or_refuse(job_desc)
  local err = vramkit.apply(job_desc)
  if err ~= nil then
    slurm.log_user("%s", err)
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  return apply_or_refuse(job_desc)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  -- Only a new comment carries a new request; other updates pass through untouched.
  if job_desc.comment == nil then return slurm.SUCCESS end
  return apply_or_refuse(job_desc)
end

return slurm.SUCCESS
