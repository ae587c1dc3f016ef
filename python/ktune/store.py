"""A local ktune store (the SQLite file `ktune tune --local` writes), read
without a daemon: the best configurations with the same fallback chain as
the daemon's GetBest, and the jobs."""
import json
import math
import os
import socket
import sqlite3
from typing import Dict, List, Optional

from ktune._values import Best, Job, KtuneError, Problem

_APPLICATION_ID = 0x6B74756E  # 'ktun'


def _distance(a: Problem, b: Problem) -> float:
    """Euclidean distance of the problems' natural logs (infinite when the
    dimensions differ), as the daemon measures it."""
    if sorted(a) != sorted(b):
        return math.inf
    return math.sqrt(sum((math.log(max(a[k], 1)) - math.log(max(b[k], 1))) ** 2 for k in a))


def _first_line(path: str) -> str:
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> Optional[int]:
    """The process's start time in clock ticks after boot (/proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 1:].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _runner_gone(runner: str) -> bool:
    """Whether `runner` ("HOST|BOOT|PIDNS|PID|START", as the store keeps the
    process that runs a job) named a process of this host that has ended,
    as ktune's own commands judge it: another host's or container's process
    cannot be told, so it is not gone."""
    parts = runner.split("|")
    if len(parts) != 5 or not parts[3].isdigit() or not parts[4].isdigit():
        return False
    host, boot, pid_ns, pid, start = parts
    if host != socket.gethostname():
        return False
    if boot != _first_line("/proc/sys/kernel/random/boot_id"):
        return True  # the host rebooted since
    try:
        if pid_ns != os.readlink("/proc/self/ns/pid"):
            return False
    except OSError:
        return False
    return _start_ticks(int(pid)) != int(start)


class Store:
    """Read only; one connection (not to be shared between threads)."""

    def __init__(self, path: str):
        if not os.path.exists(path):
            raise KtuneError(f"{path}: no such store")
        self.path = path
        try:
            self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        except sqlite3.DatabaseError:
            raise KtuneError(f"{path}: not a SQLite database, so not a ktune store") from None
        if app_id != _APPLICATION_ID:
            raise KtuneError(f"{path}: not a ktune store")

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _records(self, kernel: str) -> List[Best]:
        rows = self._db.execute(
            "SELECT d.name, d.locator, d.uuid, d.architecture, b.problem, b.objective, b.job_id, "
            "b.config_key, b.config, b.time_ms FROM best b JOIN kernels k ON k.id = b.kernel_id "
            "JOIN devices d ON d.id = b.device_id WHERE k.name = ? ORDER BY d.name, b.problem",
            (kernel,)).fetchall()
        out = []
        for name, locator, uuid, arch, problem, objective, job_id, key, config, time_ms in rows:
            b = Best(kernel=kernel, key=key, config=json.loads(config), time_ms=time_ms,
                     device=name, architecture=arch, problem=json.loads(problem), job_id=job_id,
                     objective=objective)
            b._ids = (name, locator, uuid)  # what the device may be asked as
            out.append(b)
        return out

    def best(self, kernel: str, device: str = "", problem: Optional[Problem] = None,
             exact_only: bool = False) -> Optional[Best]:
        """The exact device and problem, else the nearest problem on that
        device, else the same architecture; None when nothing fits."""
        problem = problem or {}
        records = self._records(kernel)
        if not records:
            return None
        objectives = {b.objective for b in records}
        objective = "time" if "time" in objectives else records[0].objective
        records = [b for b in records if b.objective == objective]

        def on_device(b):
            return not device or device in b._ids

        def pick(keep, nearest):
            found, best_d = None, math.inf
            for b in records:
                if not keep(b):
                    continue
                if not problem or b.problem == problem:
                    return b, 0.0
                d = _distance(problem, b.problem)
                if nearest and d < best_d:
                    found, best_d = b, d
            return (found, best_d) if found else None

        hit = pick(on_device, False)
        if hit:
            return hit[0]
        if exact_only:
            return None
        hit = pick(on_device, True)
        if hit:
            hit[0].match, hit[0].problem_distance = "nearest_problem", hit[1]
            return hit[0]
        arch = device if device.startswith("sm_") else ""
        for b in records:
            if device and device in b._ids:
                arch = b.architecture
        if not arch:
            row = self._db.execute(
                "SELECT architecture FROM devices WHERE ? IN (name, locator, uuid)",
                (device,)).fetchone()
            arch = row[0] if row else ""
        if arch:
            hit = pick(lambda b: b.architecture == arch, True)
            if hit:
                hit[0].match, hit[0].problem_distance = "same_architecture", hit[1]
                return hit[0]
        return None

    def jobs(self) -> List[Job]:
        """Every job, newest first. A job left running by a process of this
        host that has ended (killed, crashed) reads as interrupted, as in
        `ktune jobs`."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}

        def column(name: str, default: str) -> str:  # older stores lack some
            return f"j.{name}" if name in columns else default

        extra = ", ".join([column("client", "''"), column("runner", "''"),
                           column("origin", "'local'")])
        rows = self._db.execute(
            "SELECT j.id, k.name, j.state, d.name, j.problem, j.evaluations, j.strategy, "
            f"j.message, {extra} FROM jobs j JOIN kernels k ON k.id = j.kernel_id "
            "JOIN devices d ON d.id = j.device_id ORDER BY j.created_at DESC, j.id").fetchall()
        out = []
        for i, k, s, d, p, e, st, m, c, runner, origin in rows:
            if s == "running" and _runner_gone(runner):
                host, _, _, pid, _ = runner.split("|")
                s = "interrupted"
                m = (f"its process (pid {pid} on {host}) ended without recording the job's end; "
                     + ("ktuned resumes it when it starts again" if origin == "daemon"
                        else "run the same job again to resume it"))
            out.append(Job(id=i, kernel=k, state=s, device=d, problem=json.loads(p),
                           evaluations=e, strategy=st, message=m, client=c))
        return out


def open_store(path: str) -> Store:
    """The ktune store at `path` (a SQLite file), read only."""
    return Store(path)
