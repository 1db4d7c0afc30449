"""N servers started at once on the course's hub: how long, how much memory (hub/README.md). Root.

    python hub/scripts/spawn_load.py --users 30 [--spawn-limit 10] [--kernel]   (make hub-spawn-load)

Creates N throw-away students (tc-sl-<run>-NN, their own passwords), a hub on 127.0.0.1 from a
temporary state folder with the course's configuration (limits per student in force), logs
every student in at once (a thread each, over HTTP, as a browser would) and asks for their
server; measures for each the time from the request to a ready server, then each server's
memory as its cgroup counts it (and, with --kernel, after starting one Python kernel in each).
Everything is stopped and removed at the end (also on failure or Ctrl+C). Loopback only.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import hubctl  # noqa: E402
import limits  # noqa: E402


free_port_block = hubctl.free_port_block


def mem_available() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def one_student(url: str, user: str, password: str, kernel: bool, timeout: float) -> dict:
    import requests

    s = requests.Session()
    s.get(f"{url}/hub/login", timeout=60)
    t0 = time.monotonic()
    r = s.post(f"{url}/hub/login", data={"username": user, "password": password, "_xsrf": s.cookies.get("_xsrf")},
               allow_redirects=False, timeout=120)
    if r.status_code != 302:
        return {"user": user, "error": f"login {r.status_code}"}
    refused = 0
    r = s.get(f"{url}/hub/spawn/{user}", allow_redirects=False, timeout=120)
    refused += r.status_code == 429          # over concurrent_spawn_limit: "try again", as a browser's user would
    while time.monotonic() - t0 < timeout:
        m = s.get(f"{url}/hub/api/user", headers={"Referer": f"{url}/hub/"}, timeout=60).json()
        server = m.get("servers", {}).get("")
        if server and server.get("ready"):
            break
        if not server:
            time.sleep(2)
            r = s.get(f"{url}/hub/spawn/{user}", allow_redirects=False, timeout=120)
            refused += r.status_code == 429
        time.sleep(0.5)
    else:
        return {"user": user, "error": f"not ready in {timeout} s"}
    out = {"user": user, "ready_s": time.monotonic() - t0, "refused_429": refused}
    if kernel:
        s.get(f"{url}/user/{user}/lab", timeout=120)
        xsrf = s.cookies.get("_xsrf", path=f"/user/{user}/")
        k = s.post(f"{url}/user/{user}/api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": xsrf},
                   timeout=300)
        out["kernel"] = k.status_code
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=30)
    p.add_argument("--spawn-limit", type=int, default=None, help="concurrent_spawn_limit (default: the config's)")
    p.add_argument("--kernel", action="store_true", help="also start one kernel per server and measure again")
    p.add_argument("--timeout", type=float, default=600, help="seconds a server may take (bounded run)")
    p.add_argument("--venv", default=str(hubctl.DEFAULT_VENV))
    p.add_argument("--json", default=None, help="write the numbers here too")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("spawn_load.py runs as root (system users, the hub)")
    base = f"tc-sl-{secrets.token_hex(2)}"
    state = Path(tempfile.mkdtemp(prefix="tc-hub-load-"))
    cls = hubctl.Class(instructors=[], students=[], exchange=Path(f"/srv/{base}/exchange"), assignments=["01_attention"])
    extra = {} if args.spawn_limit is None else {"TC_HUB_SPAWN_LIMIT": str(args.spawn_limit)}
    result: dict = {"users": args.users, "limits": limits.mode(), "spawn_limit": args.spawn_limit or "config",
                    "cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    try:
        new = hubctl.add_users(cls, state, [f"{base}-i"], [f"{base}-{k:02d}" for k in range(args.users)])
        pw = {u: p for u, _, p in new}
        hubctl.setup_course(cls, Path(args.venv))
        avail0 = mem_available()
        hub = hubctl.start_hub(port=free_port_block(), venv=Path(args.venv), state=state, extra_env=extra)
        result["hub_start_s"] = round(hub.started_seconds, 1)
        t0 = time.monotonic()
        with cf.ThreadPoolExecutor(args.users) as pool:
            done = list(pool.map(lambda u: one_student(hub.url, u, pw[u], args.kernel, args.timeout), cls.students))
        result["wall_s"] = round(time.monotonic() - t0, 1)
        ready = sorted(d["ready_s"] for d in done if "ready_s" in d)
        result["errors"] = [d for d in done if "error" in d]
        result["ready_s"] = {"min": round(ready[0], 1), "median": round(statistics.median(ready), 1),
                             "max": round(ready[-1], 1), "n": len(ready)} if ready else {}
        result["spawn_requests_refused_429"] = sum(d.get("refused_429", 0) for d in done)
        time.sleep(15 if args.kernel else 5)
        mem = [limits.usage(u).get("memory", 0) for u in cls.students]
        result["memory_mb_per_server" + ("_with_kernel" if args.kernel else "")] = {
            "median": round(statistics.median(mem) / 2**20), "max": round(max(mem) / 2**20),
            "sum": round(sum(mem) / 2**20)}
        result["host_memory_used_mb"] = round((avail0 - mem_available()) / 2**20)
        result["load_after"] = os.getloadavg()[0]
    finally:
        hubctl.stop_hub(state=state, cls=cls)
        hubctl.teardown(cls, state)
        shutil.rmtree(f"/srv/{base}", ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if not result.get("errors") else 1


if __name__ == "__main__":
    sys.exit(main())
