#!/usr/bin/env bash
# Smoke test on a real NVIDIA GPU (docs/HARDWARE.md "Checking a real box"):
# the release binary, without --sim, runs jobs that allocate real device
# memory, and this script checks what it measured. One command, a few
# minutes on one GPU:
#
#   1. each job's measured peak covers what it allocated through the CUDA
#      driver API (Python ctypes on libcuda.so.1) plus the CUDA context;
#   2. the job saw the GPU it was placed on in CUDA_VISIBLE_DEVICES;
#   3. a job whose first attempt runs out of device memory is retried as an
#      OOM with a bigger declaration, and its second attempt ends ok;
#   4. PyTorch, JAX and CuPy jobs (each where it imports; skipped with a
#      line where not) run packed on one GPU (--placement pack), on the
#      GPU, measured; JAX's allocator stays within its declaration under
#      the default caps; each framework's own out-of-memory error is
#      retried and the retry ends ok;
#   5. a declared job hidden from its GPU (CUDA_VISIBLE_DEVICES empty) is
#      flagged as having probably run on the CPU;
#   6. a job that lies about its VRAM is stopped under --enforce stop and
#      retried big enough, its honest neighbour untouched; where
#      nvidia-cuda-mps-control exists, under --enforce mps the liar hits
#      its MPS limit and is retried past it;
#   7. `gpusched top --once` and `gpusched serve`'s /api/v1/box show the
#      GPU memory nvidia-smi shows (within 5 % or 300 MiB);
#   8. the sweeps: 12 small and 4 large PyTorch trainings, each sweep as a
#      bash loop, with the default placement, with pack and with --enforce
#      mps; the default within 10 % of the best (a table of wall times,
#      then the jobs' own utilisation NVML measured per process against
#      their GPUs', as the default run journaled them);
#   9. `gpusched doctor` finds no error.
#
# Usage: scripts/gpu-smoke.sh [--sim] [WORK_DIR]   (needs python3 and a
# GPU with 30 GiB free; builds with `cargo build --release` unless
# target/release already has the binary). Exit 0 when every check passes.
# With --sim the jobs and checks that need no framework run on simulated
# GPUs, with `gpusched simjob` in place of the CUDA allocations: a check of
# this script itself on a machine without a GPU, not of the hardware.
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"

sim=""
if [ "${1:-}" = "--sim" ]; then
    sim=1
    shift
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
bin="${GPUSCHED_BIN:-$root/target/release/gpusched}"
[ -x "$bin" ] || (cd "$root" && cargo build --release --locked)

if [ -z "$sim" ] && ! python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
    echo "gpu-smoke: libcuda.so.1 cannot be loaded: this machine has no NVIDIA driver; nothing was checked (scripts/gpu-smoke.sh --sim checks the script itself)" >&2
    exit 2
fi

# A job that allocates MIB of device memory on its first visible GPU, holds
# it for SECONDS and prints CUDA_VISIBLE_DEVICES. With a marker file
# argument that does not exist yet, it first asks for far more memory than
# any GPU has, fails with the driver's own OOM error, and leaves the marker.
cat > "$work/alloc.py" <<'PY'
import ctypes, os, sys, time

mib, seconds = int(sys.argv[1]), float(sys.argv[2])
marker = sys.argv[3] if len(sys.argv) > 3 else None
cuda = ctypes.CDLL("libcuda.so.1")

def check(result, what):
    if result == 2:  # CUDA_ERROR_OUT_OF_MEMORY (cuda.h)
        print(f"{what}: CUDA_ERROR_OUT_OF_MEMORY: out of memory", file=sys.stderr)
        sys.exit(1)
    if result != 0:
        sys.exit(f"{what} failed: CUresult {result}")

print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
check(cuda.cuInit(0), "cuInit")
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
context = ctypes.c_void_p()
check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
if marker and not os.path.exists(marker):
    open(marker, "w").close()
    mib = 1 << 30  # 1 PiB: more than any GPU
pointer = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib << 20)), "cuMemAlloc")
time.sleep(seconds)
PY

# job MIB SECONDS [MARKER]: the command line of one job.
job() {
    if [ -n "$sim" ]; then
        echo "sh -c 'echo visible \$CUDA_VISIBLE_DEVICES; exec gpusched simjob --vram $1 --ramp 0.2 --hold $2 ${3:+--oom-once $3}'"
    else
        echo "python3 $work/alloc.py $1 $2 ${3:-}"
    fi
}
cat > "$work/jobs.txt" <<EOF
[vram=1500 name=small] $(job 512 4)
[vram=2000 name=large] $(job 1024 4)
[vram=1500 retries=1 name=oom] $(job 256 2 "$work/oom-marker")
EOF

# Framework jobs, each where its framework imports (a real GPU only):
# fw.py FRAMEWORK MIB SECONDS [MARKER] holds MIB of device memory and
# multiplies matrices for SECONDS on whatever device the framework chose,
# which it prints; with a marker that does not exist yet it first asks
# for 4 TiB and dies of the framework's own out-of-memory error.
cat > "$work/fw.py" <<'PY'
import os, sys, time

fw, mib, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
marker = sys.argv[4] if len(sys.argv) > 4 else None
oom = marker is not None and not os.path.exists(marker)
if oom:
    open(marker, "w").close()
end = time.time() + seconds
if fw == "torch":
    import torch
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    print("device", "gpu" if dev == "cuda" else "cpu", flush=True)
    if oom:
        torch.empty(1 << 42, dtype=torch.uint8, device=dev)
    hold = torch.empty(mib << 20, dtype=torch.uint8, device=dev)
    a = torch.ones(2048, 2048, device=dev)
    while time.time() < end:
        a = (a @ a) / 2048.0
        if dev == "cuda":
            torch.cuda.synchronize()
elif fw == "cupy":
    import cupy
    print("device gpu", flush=True)
    if oom:
        cupy.empty(1 << 42, dtype=cupy.uint8)
    hold = cupy.empty(mib << 20, dtype=cupy.uint8)
    a = cupy.ones((2048, 2048), dtype=cupy.float32)
    while time.time() < end:
        a = (a @ a) / 2048.0
        cupy.cuda.Device().synchronize()
elif fw == "jax":
    import jax, jax.numpy as jnp
    print("device", jax.devices()[0].platform, flush=True)
    if oom:
        jnp.ones((1 << 42,), jnp.uint8).block_until_ready()
    hold = jnp.ones((mib << 20,), jnp.uint8).block_until_ready()
    a = jnp.ones((2048, 2048), jnp.float32)
    while time.time() < end:
        a = ((a @ a) / 2048.0).block_until_ready()
PY
frameworks=""
for fw in torch jax cupy; do
    if [ -z "$sim" ] && python3 -c "import $fw" 2>/dev/null; then
        frameworks="$frameworks $fw"
        echo "[vram=4096 name=$fw] python3 $work/fw.py $fw 1024 6" >> "$work/jobs.txt"
        echo "[vram=4096 retries=1 name=${fw}_oom] python3 $work/fw.py $fw 512 1 $work/$fw-oom-marker" >> "$work/jobs.txt"
    else
        echo "gpu-smoke: SKIPPED the $fw checks: $(if [ -n "$sim" ]; then echo "--sim"; else echo "$fw does not import here"; fi)"
    fi
done
# A declared job that never touches its GPU: CUDA hidden from it.
if [ -z "$sim" ] && python3 -c "import torch" 2>/dev/null; then
    echo "[vram=2048 name=cpu] CUDA_VISIBLE_DEVICES= python3 $work/fw.py torch 16 11" >> "$work/jobs.txt"
else
    echo "[vram=2048 name=cpu] sleep 11" >> "$work/jobs.txt"
fi

cd "$work"
rm -rf logs logs-liar logs-mps logs-view ./*-marker
echo "gpu-smoke: running $(wc -l < jobs.txt) jobs packed in $work with $bin${sim:+ on a simulated GPU}"
"$bin" jobs.txt --log-dir logs --poll 0.5 --placement pack --ledger "$work/ledger" ${sim:+--sim 1} || true

python3 - "$work/logs" "$frameworks" <<'PY'
import json, os, sys

logs, frameworks = sys.argv[1], sys.argv[2].split()
status = json.load(open(os.path.join(logs, "status.json")))
jobs = {j.get("name"): j for j in status["jobs"]}
journal = [json.loads(l) for l in open(os.path.join(logs, "journal.jsonl")) if l.strip()]
failed = 0

def check(ok, text):
    global failed
    print(("PASS " if ok else "FAIL ") + text)
    failed += not ok

def events(job, kind):
    return [e for e in journal if e.get("key") == job["key"] and e.get("event") == kind]

def log_word(job, word):
    log = open(job["log"]).read() if job.get("log") else ""
    return next((l.split()[1] for l in log.splitlines() if l.startswith(word + " ")), None)

for name, allocated in (("small", 512), ("large", 1024)):
    job = jobs[name]
    peak = (job.get("peak_mib") or {}).get("max")
    check(job["state"] == "ok", f"job {name} ended ok ({job['state']})")
    check(peak is not None and allocated <= peak <= allocated + 1024,
          f"job {name}: measured peak {peak} MiB covers its {allocated} MiB allocation (+ CUDA context, at most 1 GiB)")
    started = events(job, "started")
    gpus = started[-1].get("gpus") if started else None
    seen = log_word(job, "visible")
    check(gpus is not None and seen == ",".join(str(g) for g in gpus),
          f"job {name}: CUDA_VISIBLE_DEVICES={seen} is the GPU it was placed on ({gpus})")

def retried(name, declared):
    job = jobs[name]
    kinds = [e.get("event") for e in journal if e.get("key") == job["key"]]
    check("oom" in kinds and job["state"] == "ok",
          f"job {name}: first attempt retried as an OOM, then ended {job['state']} (events {kinds})")
    check((job.get("vram_mib") or 0) > declared, f"job {name}: declaration raised to {job.get('vram_mib')} MiB")

retried("oom", 1500)
spans = {}
for fw in frameworks:
    job = jobs[fw]
    peak = (job.get("peak_mib") or {}).get("max")
    check(job["state"] == "ok", f"job {fw} ended ok ({job['state']})")
    check(log_word(job, "device") == "gpu", f"job {fw} ran on the {log_word(job, 'device')}")
    check(peak is not None and 1024 <= peak <= 4096,
          f"job {fw}: measured peak {peak} MiB covers its 1024 MiB and stays within its 4096 MiB declaration")
    start, done = events(job, "started"), events(job, "done")
    if start and done:
        spans[fw] = (start[-1]["ts"], done[-1]["ts"])
    retried(f"{fw}_oom", 4096)
names = sorted(spans)
for i, a in enumerate(names):
    for b in names[i + 1:]:
        overlap = spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
        check(overlap, f"jobs {a} and {b} ran at the same time on the GPU (--placement pack)")
cpu = jobs["cpu"]
check(cpu.get("no_gpu_memory") is True,
      f"job cpu, hidden from its GPU, flagged as on the CPU (no_gpu_memory {cpu.get('no_gpu_memory')})")
sys.exit(1 if failed else 0)
PY

# The liar: declares 1000 MiB, takes 3000, beside an honest job.
{
    echo "[vram=1000 retries=1 name=liar] $(job 3000 5)"
    echo "[vram=2000 name=honest] $(job 1000 5)"
} > jobs-liar.txt
echo "gpu-smoke: a liar beside an honest job under --enforce stop"
"$bin" jobs-liar.txt --log-dir logs-liar --poll 0.5 --placement pack --enforce stop --ledger "$work/ledger" ${sim:+--sim 1} || true
mps=""
if [ -z "$sim" ] && command -v nvidia-cuda-mps-control > /dev/null; then
    echo "[vram=1000 retries=2 name=liar] $(job 3000 2)" > jobs-mps.txt
    echo "gpu-smoke: the liar under --enforce mps"
    "$bin" jobs-mps.txt --log-dir logs-mps --poll 0.5 --enforce mps --ledger "$work/ledger" 2> mps-err.txt || true
    if [ -e logs-mps/status.json ]; then
        mps=1
    else
        echo "gpu-smoke: SKIPPED the MPS check: the scheduler could not start MPS: $(head -c 300 mps-err.txt)"
    fi
else
    echo "gpu-smoke: SKIPPED the MPS check: $(if [ -n "$sim" ]; then echo "--sim"; else echo "no nvidia-cuda-mps-control here"; fi)"
fi
python3 - "$work" "$mps" <<'PY'
import json, os, sys

work, mps = sys.argv[1], sys.argv[2]
failed = 0

def check(ok, text):
    global failed
    print(("PASS " if ok else "FAIL ") + text)
    failed += not ok

def run(logs):
    status = json.load(open(os.path.join(work, logs, "status.json")))
    journal = [json.loads(l) for l in open(os.path.join(work, logs, "journal.jsonl")) if l.strip()]
    return {j.get("name"): j for j in status["jobs"]}, journal

jobs, journal = run("logs-liar")
liar, honest = jobs["liar"], jobs["honest"]
ooms = [e for e in journal if e.get("key") == liar["key"] and e.get("event") == "oom"]
cause = ooms[0].get("cause") if ooms else None
check(bool(ooms) and "exceeded_declaration" in (cause or {}), f"the liar was stopped for over-use (cause {cause})")
check(liar["state"] == "ok" and (liar.get("vram_mib") or 0) >= 3000,
      f"the liar's retry at {liar.get('vram_mib')} MiB ended {liar['state']}")
starts = [e for e in journal if e.get("key") == honest["key"] and e.get("event") == "started"]
check(honest["state"] == "ok" and len(starts) == 1,
      f"the honest job ran once ({len(starts)} attempt(s)) and ended {honest['state']}")
if mps:
    jobs, journal = run("logs-mps")
    liar = jobs["liar"]
    ooms = [e for e in journal if e.get("key") == liar["key"] and e.get("event") == "oom"]
    cause = ooms[0].get("cause") if ooms else None
    check(bool(ooms) and "mps_limit" in (cause or {}), f"under MPS the liar hit its MPS limit (cause {cause})")
    check(liar["state"] == "ok", f"under MPS the liar's retries ended {liar['state']} at {liar.get('vram_mib')} MiB")
sys.exit(1 if failed else 0)
PY

# What top and serve show against nvidia-smi, while a job holds 2 GiB.
view=(--ledger "$work/ledger")
[ -z "$sim" ] || view+=(--sim 1 --sim-dir "$work/sim-view")
echo "[vram=3000 name=hold] $(job 2048 30)" > jobs-view.txt
"$bin" jobs-view.txt --log-dir logs-view --poll 0.5 --watch "${view[@]}" > view.txt 2>&1 &
sched=$!
for _ in $(seq 150); do
    python3 -c 'import json,sys; d=json.load(open("logs-view/status.json")); sys.exit(0 if any(v for j in d["jobs"] for v in (j.get("peak_mib") or {}).values()) else 1)' 2>/dev/null && break
    sleep 0.2
done
sleep 1
(umask 077 && python3 -c 'import secrets; print(secrets.token_hex(16))' > serve-token)
port=$((20000 + RANDOM % 20000))
"$bin" serve --listen "127.0.0.1:$port" --token-file serve-token --log-dir logs-view "${view[@]}" > serve.txt 2>&1 &
serve=$!
sleep 2
"$bin" top --once --log-dir logs-view "${view[@]}" > top.txt 2>&1 || true
if [ -z "$sim" ] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits > smi.txt
else
    : > smi.txt
fi
view_failed=""
python3 - "$port" <<'PY' || view_failed=1
import json, re, sys, urllib.request

port = sys.argv[1]
token = open("serve-token").read().strip()
failed = 0

def check(ok, text):
    global failed
    print(("PASS " if ok else "FAIL ") + text)
    failed += not ok

request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/box",
                                 headers={"Authorization": f"Bearer {token}"})
box = json.load(urllib.request.urlopen(request, timeout=10))
served = {g["index"]: g["used_mib"] for g in box["gpus"]}
top = {int(m.group(1)): int(m.group(2))
       for m in re.finditer(r"^GPU (\d+)\s+(\d+)/\d+ MiB", open("top.txt").read(), re.M)}
check(bool(top) and bool(served), f"top --once shows GPUs {sorted(top)}, serve shows {sorted(served)}")
smi = {int(a): int(b) for a, b in (l.split(",") for l in open("smi.txt") if l.strip())}
close = lambda a, b: abs(a - b) <= max(300, 0.05 * max(a, b))
reference = smi or served
what = "nvidia-smi" if smi else "serve (no nvidia-smi here)"
for index, used in reference.items():
    if index in top:
        check(close(top[index], used), f"GPU {index}: top --once {top[index]} MiB, {what} {used} MiB")
    if index in served:
        check(close(served[index], used), f"GPU {index}: serve {served[index]} MiB, {what} {used} MiB")
check(any(u >= 2048 for u in reference.values()), f"the held 2 GiB show: {reference}")
sys.exit(1 if failed else 0)
PY
kill "$serve" 2>/dev/null || true
"$bin" stop --log-dir logs-view > /dev/null 2>&1 || true
wait "$sched" 2>/dev/null || true
[ -z "$view_failed" ] || exit 1

# Containment (docs/BEHAVIOUR.md "Containment"), where this box gives
# gpusched cgroups: a host OOM at mem=, a GPU job pinned to CPUs near its
# GPU with a host memory limit it keeps to, a leftover killed at the end,
# a CPU-only job with no GPU in sight.
if "$bin" doctor --log-dir logs --ledger "$work/ledger" ${sim:+--sim 1} | grep -q "^ok    cgroups for jobs"; then
    "$bin" doctor --log-dir logs --ledger "$work/ledger" ${sim:+--sim 1} | grep "cgroups for jobs"
    {
        echo "[mem=256M name=hostoom] python3 -c \"b = bytearray(1 << 30); print('allocated')\""
        echo "[vram=2000 mem=6G cpus=2 name=contained] grep Cpus_allowed_list /proc/self/status; $(job 512 3)"
        echo "[name=leaver] setsid sleep 300 & echo left"
        echo "[gpus=0 name=cpuonly] echo \"visible=[\$CUDA_VISIBLE_DEVICES] \${CUDA_VISIBLE_DEVICES+set}\""
    } > jobs-contain.txt
    echo "gpu-smoke: contained jobs"
    "$bin" jobs-contain.txt --log-dir logs-contain --poll 0.5 --placement pack --ledger "$work/ledger" ${sim:+--sim 1} || true
    python3 - "$work" <<'PY'
import json, os, subprocess, sys

work = sys.argv[1]
failed = 0

def check(ok, text):
    global failed
    print(("PASS " if ok else "FAIL ") + text)
    failed += not ok

status = json.load(open(os.path.join(work, "logs-contain", "status.json")))
jobs = {j.get("name"): j for j in status["jobs"]}
journal = [json.loads(l) for l in open(os.path.join(work, "logs-contain", "journal.jsonl")) if l.strip()]
log = lambda name: open(jobs[name]["log"]).read()
check(jobs["hostoom"]["state"] == "host_oom", f"a job over mem=256M ended {jobs['hostoom']['state']}")
contained = jobs["contained"]
cpus = next((l.split(":", 1)[1].strip() for l in log("contained").splitlines() if l.startswith("Cpus_allowed_list")), "")
count = sum(len(range(int(a), int(b) + 1)) if b else 1 for a, _, b in (p.partition("-") for p in cpus.split(",") if p))
check(contained["state"] == "ok" and count == 2,
      f"a GPU job under mem=6G cpus=2 ended {contained['state']} on CPUs {cpus}")
started = [e for e in journal if e.get("key") == contained["key"] and e.get("event") == "started"]
check(bool(started and started[-1].get("cgroup")), f"its cgroup: {started[-1].get('cgroup') if started else None}")
left = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True).stdout.split()
check(not left, f"the leaver's setsid sleep is gone (left: {left})")
check("visible=[] set" in log("cpuonly") and jobs["cpuonly"]["state"] == "ok",
      "a CPU-only job saw an empty CUDA_VISIBLE_DEVICES")
sys.exit(1 if failed else 0)
PY
else
    echo "gpu-smoke: SKIPPED the containment checks: $("$bin" doctor --log-dir logs ${sim:+--sim 1} | grep "cgroups for jobs")"
fi

# The sweeps (docs/PERFORMANCE.md "On a real GPU"): 12 small PyTorch
# trainings that leave the GPU partly idle (a small model, a batch made
# on the CPU each step) and 4 large compute-bound ones, each sweep run as
# a bash loop (one job at a time), with the default placement, with
# --placement pack and, where MPS exists, with --enforce mps. Fixed work
# per job, so the wall times compare; the default must be within 10 % of
# the best on each sweep. GPUSCHED_SMOKE_SWEEP=0 skips them.
if [ -z "$sim" ] && [ "${GPUSCHED_SMOKE_SWEEP:-1}" != 0 ] && python3 -c "import torch" 2>/dev/null; then
    cat > "$work/train.py" <<'PY'
import sys, time, torch

kind, steps = sys.argv[1], int(sys.argv[2])
dev = "cuda"
if kind == "small":
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(3)]).to(dev)
    batch = lambda: torch.randn(256, 512).to(dev)
else:
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(4)]).to(dev)
    batch = lambda: torch.randn(4096, 8192, device=dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
for _ in range(steps):
    loss = model(batch()).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("trained", kind, steps, flush=True)
PY
    small_steps=${GPUSCHED_SMOKE_SMALL_STEPS:-3000}
    large_steps=${GPUSCHED_SMOKE_LARGE_STEPS:-300}
    for i in $(seq 12); do echo "[vram=3G] python3 $work/train.py small $small_steps # $i"; done > sweep-small.txt
    for i in $(seq 4); do echo "[vram=12G] python3 $work/train.py large $large_steps # $i"; done > sweep-large.txt
    # wall FILE ARGS...: seconds for gpusched to run FILE's jobs.
    wall() {
        local file=$1 s e
        shift
        rm -rf logs-sweep
        s=$(date +%s.%N)
        "$bin" "$file" --log-dir logs-sweep --poll 0.5 --ledger "$work/ledger" "$@" > /dev/null 2>&1 || echo "gpu-smoke: gpusched $* on $file failed" >&2
        e=$(date +%s.%N)
        python3 -c "print(round($e - $s, 1))"
    }
    # loop FILE: seconds for a bash loop to run FILE's commands one by one.
    loop() {
        local s e
        s=$(date +%s.%N)
        sed 's/^\[[^]]*\] //' "$1" | while read -r line; do sh -c "$line" > /dev/null 2>&1; done
        e=$(date +%s.%N)
        python3 -c "print(round($e - $s, 1))"
    }
    # measured: what the last run journaled of each job's own utilisation
    # (its processes', NVML per process) against its GPU's.
    measured() {
        python3 - logs-sweep/journal.jsonl <<'PY'
import json, sys
own, gpu = [], []
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("event") == "done":
        if e.get("own_util") is not None:
            own.append(e["own_util"])
        if e.get("avg_util") is not None:
            gpu.append(e["avg_util"])
span = lambda v: f"{min(v):.0f}-{max(v):.0f} %" if v else "none"
print(f"own utilisation {span(own)} ({len(own)} jobs), their GPUs' {span(gpu)}")
PY
    }
    sweep_failed=""
    notes=""
    echo "gpu-smoke: sweeps (wall seconds; fixed work per job)"
    echo "| sweep | bash loop | default | --placement pack | --enforce mps |"
    echo "|---|---|---|---|---|"
    for sweep in small large; do
        l=$(loop "sweep-$sweep.txt")
        d=$(wall "sweep-$sweep.txt")
        notes="${notes}gpu-smoke: $sweep sweep, default: $(measured)
"
        p=$(wall "sweep-$sweep.txt" --placement pack)
        m="—"
        [ -n "$mps" ] && m=$(wall "sweep-$sweep.txt" --enforce mps)
        n=$([ "$sweep" = small ] && echo 12 || echo 4)
        echo "| $n $sweep | $l | $d | $p | $m |"
        best=$(printf '%s\n' "$l" "$d" "$p" "$m" | grep -v "—" | sort -g | head -1)
        if python3 -c "import sys; sys.exit(0 if $d <= 1.10 * $best else 1)"; then
            echo "PASS the default ran the $sweep sweep within 10 % of the best ($d s against $best s)"
        else
            echo "FAIL the default ran the $sweep sweep in $d s, more than 1.1 × the best ($best s)"
            sweep_failed=1
        fi
    done
    printf '%s' "$notes"
    echo "gpu-smoke: $(python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda)'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    [ -z "$sweep_failed" ] || exit 1
else
    echo "gpu-smoke: SKIPPED the sweeps: they need a real GPU and PyTorch (or GPUSCHED_SMOKE_SWEEP=0 was given)"
fi

echo "gpu-smoke: gpusched doctor"
"$bin" doctor --log-dir logs --ledger "$work/ledger" ${sim:+--sim 1}
echo "gpu-smoke: every check passed"
