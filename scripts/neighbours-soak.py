#!/usr/bin/env python3
"""A neighbours' soak (docs/SECURITY.md "Neighbours"): three users and root
on one simulated box of 8 GPUs, everything they do to each other at once.

Usage (as root): scripts/neighbours-soak.py [SECONDS] [JOBS_PER_USER]
(defaults 120 and 600; GPUSCHED_BIN names the binary, default
target/release/gpusched).

Each of three test users (gpusched-t-alice, -bob, -mal; made if missing)
runs a scheduler on the shared simulated box with JOBS_PER_USER mixed
VRAM jobs (`gpusched simjob`, 1-12 GB, 0.2-1.5 s, some failing) under box
rules. For SECONDS, a chaos loop picks at random: kill -9 of a
scheduler (started again at once) or of a supervisor, an atomic or a
truncating edit of the rules file, `reserve`/`unreserve` by a user,
`cancel` and `retry` of a job, root's `top --once`, and a request to the
owner's `serve`. A sampler reads every live scheduler's bookings in the
ledger every 50 ms: the bookings of running jobs (their process group
alive) must never pass a GPU's memory. `starting` bookings are counted
apart (samples_starting_over): two schedulers that decided without
seeing each other both publish one, and the later withdraws its start
(the ledger's conflict rule), so they may pass it for a moment by
design. Reservations are left out: one may be made on a GPU in use, and
waits for its memory. Afterwards every scheduler runs to the end of its
queue and the script checks:

* no GPU was ever booked past its memory (24000 MiB) by running jobs;
* every line of every jobs file ended exactly once (a final `done`,
  never two `ok` without a `retry` between them), and each queue ended;
* every journal line parses (nothing torn or lost);
* the owner's serve answered every request.

It prints the figures and exits 1 if any check failed. It stops only the
processes it started, by pid.
"""

import json
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SIM_MIB = 24000
USERS = ["gpusched-t-alice", "gpusched-t-bob", "gpusched-t-mal"]


def die(why):
    print(f"neighbours-soak: {why}", file=sys.stderr)
    sys.exit(1)


def user(name):
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", name], check=True)
        pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid


def as_user(uid, gid):
    def drop():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return drop


def main():
    if os.geteuid() != 0:
        die("needs root (it acts as three test users)")
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    binary = os.path.realpath(os.environ.get("GPUSCHED_BIN", "target/release/gpusched"))
    if not os.access(binary, os.X_OK):
        die(f"no binary at {binary} (cargo build --release)")
    rng = random.Random(int(os.environ.get("SOAK_SEED", "7")))
    work = tempfile.mkdtemp(prefix="gpusched-soak-")
    os.chmod(work, 0o755)
    env = dict(os.environ, TZ="UTC")
    env.pop("GPUSCHED_BOX_RULES", None)
    gpus = os.path.join(work, "gpus")
    subprocess.run([binary, "ledger", "init", "--sim-dir", gpus], check=True,
                   stdout=subprocess.DEVNULL)
    ledger = os.path.join(gpus, "ledger")
    etc = os.path.join(work, "etc")
    os.mkdir(etc, 0o755)
    rules = os.path.join(etc, "box.toml")

    def write_rules(max_running):
        tmp = rules + ".new"
        with open(tmp, "w") as f:
            f.write(f"[quota.default]\nmax_running = {max_running}\n[fair_share]\nhalf_life = \"1h\"\n")
        os.chmod(tmp, 0o644)
        os.rename(tmp, rules)

    write_rules(6)
    box = ["--sim", "8", "--sim-dir", gpus, "--ledger", ledger, "--box-rules", rules]
    people = []
    for name in USERS:
        uid, gid = user(name)
        home = os.path.join(work, name)
        os.mkdir(home, 0o755)
        os.chown(home, uid, gid)
        lines = []
        for n in range(jobs):
            mib = rng.choice([1000, 2000, 4000, 6000, 8000, 12000])
            hold = rng.choice([0.2, 0.5, 1.0, 1.5])
            code = 1 if rng.random() < 0.05 else 0
            lines.append(f"[vram={mib}] {binary} simjob --vram {mib} --ramp 0.1 --hold {hold}"
                         f" --exit-code {code} # {name} {n}\n")
        jobs_file = os.path.join(home, "jobs.txt")
        with open(jobs_file, "w") as f:
            f.writelines(lines)
        os.chown(jobs_file, uid, gid)
        people.append({"name": name, "uid": uid, "gid": gid, "home": home,
                       "jobs": jobs_file, "logs": os.path.join(home, "logs"), "proc": None})

    def start(p):
        p["proc"] = subprocess.Popen(
            [binary, p["jobs"], "--log-dir", p["logs"], "--poll", "0.2"] + box,
            cwd=p["home"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=as_user(p["uid"], p["gid"]))

    def verb(p, args, timeout=30):
        return subprocess.run([binary] + args, cwd=p["home"], env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL, capture_output=True,
                              preexec_fn=as_user(p["uid"], p["gid"]))

    for p in people:
        start(p)
    # The owner's serve (alice's, as alice).
    port = 18000 + rng.randrange(1000)
    config = os.path.join(people[0]["home"], "config")
    os.mkdir(config, 0o700)
    os.chown(config, people[0]["uid"], people[0]["gid"])
    serve = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--log-dir", people[0]["logs"]] + box,
        cwd=people[0]["home"], env=dict(env, XDG_CONFIG_HOME=config),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=as_user(people[0]["uid"], people[0]["gid"]))

    figures = {"samples": 0, "overbooked_mib": 0, "samples_starting_over": 0, "scheduler_kills": 0,
               "supervisor_kills": 0, "rules_atomic": 0, "rules_truncated": 0,
               "reserves": 0, "cancels": 0, "retries": 0, "root_tops": 0,
               "serve_requests": 0, "serve_answered": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            booked, held = {}, {}
            for entry in os.scandir(ledger):
                try:
                    doc = json.loads(open(entry.path).read())
                except (OSError, ValueError):
                    continue
                if entry.name.endswith(".json") and isinstance(doc, dict):
                    pid = doc.get("pid", 0)
                    if not os.path.exists(f"/proc/{pid}"):
                        continue
                    for b in doc.get("bookings", []):
                        gpu = b["gpu_uuid"]
                        if b.get("starting"):
                            booked[gpu] = booked.get(gpu, 0) + b["mib"]
                        elif os.path.exists(f"/proc/{b.get('pgid', 0)}"):
                            booked[gpu] = booked.get(gpu, 0) + b["mib"]
                            held[gpu] = held.get(gpu, 0) + b["mib"]
            figures["samples"] += 1
            over = max([m - SIM_MIB for m in held.values()] + [0])
            figures["overbooked_mib"] = max(figures["overbooked_mib"], over)
            over = max([m - SIM_MIB for m in booked.values()] + [0])
            if over > 0:
                figures["samples_starting_over"] += 1
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()

    def token():
        try:
            return open(os.path.join(config, "gpusched", "serve-token")).read().strip()
        except OSError:
            return None

    end = time.time() + seconds
    while time.time() < end:
        p = rng.choice(people)
        action = rng.randrange(9)
        try:
            if action == 0 and p["proc"].poll() is None:
                os.kill(p["proc"].pid, signal.SIGKILL)
                p["proc"].wait()
                figures["scheduler_kills"] += 1
                start(p)
            elif action == 1:
                out = subprocess.run(["pgrep", "-u", str(p["uid"]), "-f", "__supervise"],
                                     capture_output=True, text=True).stdout.split()
                if out:
                    os.kill(int(rng.choice(out)), signal.SIGKILL)
                    figures["supervisor_kills"] += 1
            elif action == 2:
                write_rules(rng.choice([4, 6, 8]))
                figures["rules_atomic"] += 1
            elif action == 3:
                open(rules, "w").close()
                time.sleep(0.3)
                write_rules(6)
                figures["rules_truncated"] += 1
            elif action == 4:
                if verb(p, ["reserve", "--vram", "2000", "--for", "5s"] + box).returncode == 0:
                    figures["reserves"] += 1
                if rng.random() < 0.5:
                    verb(p, ["unreserve"] + box)
            elif action == 5:
                no = str(rng.randrange(1, jobs + 1))
                if verb(p, ["cancel", no, "--log-dir", p["logs"]]).returncode == 0:
                    figures["cancels"] += 1
            elif action == 6:
                no = str(rng.randrange(1, jobs + 1))
                if verb(p, ["retry", no, "--log-dir", p["logs"]]).returncode == 0:
                    figures["retries"] += 1
            elif action == 7:
                subprocess.run([binary, "top", "--once", "--log-dir", p["logs"]] + box, env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
                figures["root_tops"] += 1
            elif action == 8 and token():
                figures["serve_requests"] += 1
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/api/v1/box",
                    headers={"Authorization": f"Bearer {token()}"})
                with urllib.request.urlopen(request, timeout=10) as r:
                    if r.status == 200:
                        figures["serve_answered"] += 1
        except (subprocess.TimeoutExpired, OSError) as e:
            print(f"neighbours-soak: {e}", file=sys.stderr)
        time.sleep(rng.uniform(0.1, 0.6))

    # The end: every scheduler alive runs its queue out.
    write_rules(6)
    deadline = time.time() + 60 + jobs * 1.0
    for p in people:
        if p["proc"].poll() is not None:
            start(p)
    for p in people:
        left = max(1.0, deadline - time.time())
        try:
            p["proc"].wait(timeout=left)
        except subprocess.TimeoutExpired:
            p["proc"].send_signal(signal.SIGTERM)
            p["proc"].wait()
            print(f"neighbours-soak: {p['name']}'s queue did not end in time", file=sys.stderr)
    stop.set()
    sampler.join()
    serve.send_signal(signal.SIGTERM)
    serve.wait()

    bad = []
    jobs_total = 0
    for p in people:
        final = {}
        with open(os.path.join(p["logs"], "journal.jsonl")) as f:
            for number, line in enumerate(f, 1):
                try:
                    event = json.loads(line)
                except ValueError:
                    bad.append(f"{p['name']}: journal line {number} does not parse")
                    continue
                key = event.get("key")
                kind = event.get("event")
                if kind == "done":
                    final.setdefault(key, []).append(event["status"])
                if kind == "retry":
                    final.pop(key, None)
        for key, statuses in final.items():
            if statuses.count("ok") > 1:
                bad.append(f"{p['name']}: job {key} ended ok {statuses.count('ok')} times")
        status = json.load(open(os.path.join(p["logs"], "status.json")))
        counts = status.get("counts", {})
        if any(counts.get(state, 0) for state in ("running", "pending", "retry_wait", "held")):
            bad.append(f"{p['name']}: queue not ended: {counts}")
        jobs_total += len(final)
        if len(final) != jobs:
            bad.append(f"{p['name']}: {len(final)} of {jobs} jobs have a final state")
    if figures["overbooked_mib"] > 0:
        bad.append(f"a GPU was booked {figures['overbooked_mib']} MiB past its memory")
    if figures["serve_answered"] != figures["serve_requests"]:
        bad.append("serve did not answer every request")
    figures["jobs"] = jobs_total
    print("neighbours-soak: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    for line in bad:
        print(f"neighbours-soak: FAILED: {line}")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
