#!/usr/bin/env bash
# Smoke test on a real NVIDIA GPU (docs/HARDWARE.md "Checking a real box"):
# the release binary, without --sim, runs jobs that allocate real device
# memory through the CUDA driver API (Python ctypes on libcuda.so.1; no
# framework needed), and this script checks what it measured:
#
#   1. each job's measured peak covers what it allocated (plus the CUDA
#      context, at most 1 GiB more);
#   2. the job saw the GPU it was placed on in CUDA_VISIBLE_DEVICES;
#   3. a job whose first attempt runs out of device memory is retried as an
#      OOM with a bigger declaration, and its second attempt ends ok;
#   4. where JAX imports (a real GPU only), a declared JAX job runs on the
#      GPU, not the CPU, under gpusched's default caps, and its whole
#      process (pool and CUDA context) stays within its declaration;
#   5. `gpusched doctor` finds no error.
#
# Usage: scripts/gpu-smoke.sh [--sim] [WORK_DIR]   (needs python3 and a
# GPU with 2 GiB free; builds with `cargo build --release` unless
# target/release already has the binary). Exit 0 when every check passes.
# With --sim the same jobs and checks run on one simulated GPU, with
# `gpusched simjob` in place of the CUDA allocations: a check of this
# script itself on a machine without a GPU, not of the hardware.
set -euo pipefail

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

# A JAX job, where JAX imports: matrix products for a few seconds on
# whatever device JAX chose, which it prints.
if [ -z "$sim" ] && python3 -c 'import jax' 2>/dev/null; then
    cat > "$work/jax_job.py" <<'PY'
import time
import jax, jax.numpy as jnp
device = jax.devices()[0]
print("platform", device.platform, device, flush=True)
x = jnp.ones((4096, 4096), jnp.float32)
end, products = time.time() + 5, 0
while time.time() < end:
    x = (x @ x) / 4096.0
    x.block_until_ready()
    products += 1
print("products", products, flush=True)
PY
    echo "[vram=4096 name=jax] python3 $work/jax_job.py" >> "$work/jobs.txt"
else
    echo "gpu-smoke: SKIPPED the JAX check: ${sim:+--sim}${sim:-JAX does not import here}"
fi

cd "$work"
rm -rf logs "$work/oom-marker"
echo "gpu-smoke: running $(wc -l < jobs.txt) jobs in $work with $bin${sim:+ on a simulated GPU}"
"$bin" jobs.txt --log-dir logs --poll 0.5 --ledger "$work/ledger" ${sim:+--sim 1}

python3 - "$work/logs" <<'PY'
import json, os, sys

logs = sys.argv[1]
status = json.load(open(os.path.join(logs, "status.json")))
jobs = {j.get("name"): j for j in status["jobs"]}
journal = [json.loads(l) for l in open(os.path.join(logs, "journal.jsonl")) if l.strip()]
failed = 0

def check(ok, text):
    global failed
    print(("PASS " if ok else "FAIL ") + text)
    failed += not ok

for name, allocated in (("small", 512), ("large", 1024)):
    job = jobs[name]
    peak = (job.get("peak_mib") or {}).get("max")
    check(job["state"] == "ok", f"job {name} ended ok ({job['state']})")
    check(peak is not None and allocated <= peak <= allocated + 1024,
          f"job {name}: measured peak {peak} MiB covers its {allocated} MiB allocation (+ CUDA context, at most 1 GiB)")
    started = [e for e in journal if e.get("key") == job["key"] and e.get("event") == "started"]
    gpus = started[-1].get("gpus") if started else None
    log = open(job["log"]).read() if job.get("log") else ""
    seen = next((l.split()[1] for l in log.splitlines() if l.startswith("visible ")), None)
    check(gpus is not None and seen == ",".join(str(g) for g in gpus),
          f"job {name}: CUDA_VISIBLE_DEVICES={seen} is the GPU it was placed on ({gpus})")

oom = jobs["oom"]
kinds = [e.get("event") for e in journal if e.get("key") == oom["key"]]
check("oom" in kinds and oom["state"] == "ok",
      f"job oom: first attempt retried as an OOM, then ended {oom['state']} (events {kinds})")
check((oom.get("vram_mib") or 0) > 1500, f"job oom: declaration raised to {oom.get('vram_mib')} MiB")

jax = jobs.get("jax")
if jax is not None:
    log = open(jax["log"]).read() if jax.get("log") else ""
    platform = next((l.split()[1] for l in log.splitlines() if l.startswith("platform ")), None)
    peak = (jax.get("peak_mib") or {}).get("max")
    check(jax["state"] == "ok", f"job jax ended ok ({jax['state']})")
    check(platform == "gpu", f"job jax ran on the {platform} under the default caps (XLA_PYTHON_CLIENT_MEM_FRACTION only)")
    check(peak is not None and 0 < peak <= 4096,
          f"job jax: measured peak {peak} MiB (pool and CUDA context) within its 4096 MiB declaration")
sys.exit(1 if failed else 0)
PY

echo "gpu-smoke: gpusched doctor"
"$bin" doctor --log-dir logs --ledger "$work/ledger" ${sim:+--sim 1}
echo "gpu-smoke: every check passed"
