#!/usr/bin/env bash
# Drain time of 1,000 tiny jobs (`--sim 2`, `--notify-on all`, so every
# outcome is posted) with no endpoint, a fast one, one that answers after
# 20 s, and one that refuses connections. Prints, per case: seconds from
# the first start to the last end (from the journal), seconds to the
# scheduler's exit, and what the terminal said about --notify.
# Usage: scripts/notify-drain.sh [JOBS]   (needs a release build and python3)
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$repo/target/release/gpusched"
n="${1:-1000}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/server.py" <<'PY'
import http.server, socketserver, sys, time
delay = float(sys.argv[2])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(delay)
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args): pass
    def handle(self):
        try: super().handle()
        except (BrokenPipeError, ConnectionResetError): pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
PY
python3 "$work/server.py" 18801 0 & python3 "$work/server.py" 18802 20 &
sleep 1
for i in $(seq 1 "$n"); do echo "[vram=100M] true $i"; done > "$work/jobs.txt"
run() { # name, extra args...
  local name="$1"; shift
  rm -rf "$work/logs"
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" "$work/jobs.txt" --sim 2 --poll 1 --log-dir "$work/logs" --notify-on all "$@" > "$work/out.txt" 2>&1 || true
  t1=$(date +%s.%N)
  python3 - "$work/logs/journal.jsonl" "$name" "$t0" "$t1" "$work/out.txt" <<'PY'
import json, sys
starts, ends = [], []
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: continue
    if r["event"] == "started": starts.append(r["ts"])
    if r["event"] == "done": ends.append(r["ts"])
said = [l.strip() for l in open(sys.argv[5]) if "--notify" in l]
print(f"{sys.argv[2]:<28} drain {max(ends)-min(starts):6.2f} s   exit after {float(sys.argv[4])-float(sys.argv[3]):6.2f} s   {len(ends)} ended")
for l in said: print("    " + l[:150])
PY
}
run "no --notify"
run "fast endpoint" --notify http://127.0.0.1:18801/hook
run "endpoint answers after 20 s" --notify http://127.0.0.1:18802/hook
run "endpoint refuses" --notify http://127.0.0.1:18803/hook
