#!/usr/bin/env python3
"""The API of `gpusched serve` under parallel clients (docs/PERFORMANCE.md
"Serving the box"): CLIENTS threads each GET PATH REQUESTS times over
loopback, one connection per request; prints the latency median, 99th
percentile and maximum (ms), the requests per second, and any errors.

Usage: scripts/serve-bench.py URL [CLIENTS] [REQUESTS] [PATH...]
Example: scripts/serve-bench.py http://127.0.0.1:8765 50 40 /api/v1/box /api/v1/status
"""

import statistics
import sys
import threading
import time
import urllib.request

base = sys.argv[1].rstrip("/")
clients = int(sys.argv[2]) if len(sys.argv) > 2 else 50
requests = int(sys.argv[3]) if len(sys.argv) > 3 else 40
paths = sys.argv[4:] or ["/api/v1/box"]

for path in paths:
    latencies, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client():
        start.wait()
        for _ in range(requests):
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(base + path, timeout=10) as r:
                    r.read()
                    ok = r.status == 200
            except Exception as e:  # noqa: BLE001 - every failure is counted
                ok = False
                with lock:
                    errors.append(str(e))
            dt = (time.perf_counter() - t) * 1000
            if ok:
                with lock:
                    latencies.append(dt)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - began
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0
    print(
        f"{path}: {clients} clients x {requests}: median {statistics.median(latencies):.1f} ms, "
        f"p99 {p99:.1f} ms, max {latencies[-1]:.1f} ms, {len(latencies) / took:.0f} req/s, "
        f"{len(errors)} errors"
    )
