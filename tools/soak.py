"""``make soak``: a fleet of real processes under steady load with random ``kill -9`` and restarts.

What it runs (loopback DDS, a random domain unless ROS_DOMAIN_ID is set): the planner (simulated
engine by default, ``--engine llamacpp`` for the embedded LLM), ``--drones`` drone nodes and
``--arms`` arm nodes (sim backends, ``--robot-time-scale``), and the recorder — each its own OS
process, started like ``timely-llm fleet`` starts them (:func:`timely_llm_ros.fleet.fleet_nodes`).
This process publishes ``--rate`` tasks/s for ``--minutes`` (LRTrace catalog tasks, round-robin
over the robots) and watches every ``/task_status``.

Chaos: every ``--kill-every`` seconds on average (exponential gaps, ``--seed``) one of the planner,
a random robot or the recorder (``--kill-targets``) gets SIGKILL and is restarted ``--restart-delay`` seconds later (the
recorder into a new bag). A process that dies on its own is restarted too and counted: the run fails.

Task publishers must retry on a topic: a task published while no planner listens (or taken by a
planner killed before it journaled it) is gone without a trace. Like a robot, the client publishes
again (same id) every task that got no status at all within ``--retry-after`` seconds while a
planner is up (``--max-retries`` times); a planner that has the task answers the copy as a
``#dup`` and changes nothing. ``--retry-after 0`` turns this off (to see the raw topic behaviour).

Then the publishing stops, kills stop, and the run drains (``--drain`` seconds at most) until every
task has a final status; then the planner gets SIGINT (a clean stop must give every open task a
final status), then the robots and the recorder.

Every node runs in the report directory with ``ROS_HOME`` inside it (ROS logs, the planner's crash
journal): a restarted planner sees this run's journal and no other's.

Report (``--out``, default ``soak_<date>_<time>``): ``soak.json`` (configuration, kill/restart
timeline, accounting, RSS samples), ``rss.png`` (RSS of every process over time) and the table on
stdout (see ``tools/soak_report.py`` for the definitions). Exit status 1 when any task published
while the planner was up never got a final status (``lost``), when (retries on) a task published
while it was down never got one either, or when a process died by itself.

``--burst N`` instead publishes N tasks as fast as possible (about 1 s for 3000), without kills,
and accounts for every one.

Examples::

    make soak                                   # 2 tasks/s for 10 min, kills every ~60 s
    make soak SOAK_ARGS="--rate 1 --minutes 2 --kill-every 20"
    make soak SOAK_ARGS="--burst 3000"
    make soak SOAK_ARGS="--engine llamacpp --rate 0.2 --minutes 10"
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

from soak_report import Ledger, RssLog, rss_mib, table, write_json, write_png  # noqa: E402

from timely_llm_ros.fleet import NodeSpec, fleet_nodes  # noqa: E402


def soak_env() -> dict[str, str]:
    """This run's environment: loopback-only DDS and a domain of its own (as the Makefile sets)."""
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(REPO / "config" / "fastdds_localhost.xml")
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    env.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 101)))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH", "")])])
    return env


class Managed:
    """One node process that can be killed and restarted; its log is appended across restarts."""

    def __init__(self, role: str, spec: NodeSpec, out: Path, env: dict[str, str]) -> None:
        self.role = role
        self.spec = spec
        self.out = out
        self.env = env
        self.generation = -1
        self.proc: subprocess.Popen | None = None
        self.restarting = False  # the chaos thread owns the process right now

    def start(self) -> None:
        self.generation += 1
        params = dict(self.spec.params)
        if self.spec.role == "recorder":
            params["output"] = str(self.out / "bags" / f"bag_{self.generation}")
        pfile = self.out / "params" / f"{self.role}_{self.generation}.yaml"
        pfile.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}, sort_keys=False))
        with open(self.out / "logs" / f"{self.role}.log", "a", encoding="utf-8") as log:
            log.write(f"\n===== {self.role} generation {self.generation} =====\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.spec.command(pfile),
                env=self.env,
                stdout=log,
                cwd=self.out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int, timeout: float) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=30)


class Soak:
    """One run (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        from soak_client import SoakClient, TaskFactory

        self.args = args
        self.out = out
        for sub in ("logs", "params", "bags"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        self.env = soak_env()
        # ROS logs and the planner's journal (under ROS_HOME) belong to this run: a restarted planner
        # recovers this run's tasks and no other's; nodes run in the report directory
        self.env["ROS_HOME"] = str(out / "ros_home")
        os.environ.update(
            {
                k: self.env[k]
                for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "ROS_DOMAIN_ID")
            }
        )
        self.agents = {f"drone_{i + 1}": "drone" for i in range(args.drones)}
        self.agents.update({f"arm_{i + 1}": "arm" for i in range(args.arms)})
        self.procs = self._graph()
        self.ledger = Ledger()
        self.rss = RssLog()
        self.events: list[dict] = []
        self.client = SoakClient(self.ledger)
        self.factory = TaskFactory(self.agents, "robot_arm", args.seed)
        self.rng = random.Random(args.seed)
        self.planner_up = False
        self.unexpected: list[dict] = []
        self._stop = threading.Event()
        self._chaos_on = threading.Event()

    def _graph(self) -> dict[str, Managed]:
        a = self.args
        planner = {
            "engine": a.engine,
            "policy": "timely",
            "robot_grace_period": 5.0,
            "segment_timeout_margin": 10.0,
        }
        for item in a.planner_param:
            key, _, value = item.partition("=")
            planner[key.strip()] = yaml.safe_load(value)
        robot = {"backend": "sim", "exec_mode": "sampled", "time_scale": a.robot_time_scale}
        cfg = {
            "planner": {"parameters": planner},
            "robot_defaults": {"drone": dict(robot), "arm": {**robot, "skill_set": "robot_arm"}},
            "robots": [{"agent": agent, "type": rtype} for agent, rtype in self.agents.items()],
            "recorder": {"enabled": True, "parameters": {}},
        }
        out = {}
        for spec in fleet_nodes(cfg):
            role = spec.namespace if spec.role == "robot" else spec.role
            out[role] = Managed(role, spec, self.out, self.env)
        return out

    # ------------------------------------------------------------------ helpers
    def log(self, event: str, **kw) -> None:
        entry = {"t": round(self.client.now(), 3), "event": event, **kw}
        self.events.append(entry)
        print(
            f"[soak {entry['t']:8.1f} s] {event} " + " ".join(f"{k}={v}" for k, v in kw.items()), flush=True
        )

    def ready(self, role: str, timeout: float, stale: set[tuple] = frozenset()) -> bool:
        ok = self.client.wait(lambda: self.client.up(role, stale), timeout)
        if ok and role == "planner":
            time.sleep(1.0)  # the planner's reader matches our writer too (matching is not symmetric)
            self.planner_up = True
        return ok

    def restart(self, role: str, why: str, stale: set[tuple] = frozenset()) -> None:
        m = self.procs[role]
        m.start()
        ok = self.ready(role, self.args.ready_timeout, stale)
        self.log("restart", target=role, generation=m.generation, ready=ok, after=why)

    # ------------------------------------------------------------------ threads
    def _sampler(self) -> None:
        while not self._stop.wait(self.args.sample_period):
            t = self.client.now()
            for role, m in self.procs.items():
                if m.alive():
                    mib = rss_mib(m.proc.pid)
                    if mib is not None:
                        self.rss.add(t, role, m.generation, m.proc.pid, mib)
            mib = rss_mib(os.getpid())
            if mib is not None:
                self.rss.add(t, "soak_client", 0, os.getpid(), mib)

    def _chaos(self) -> None:
        robots = [r for r in self.procs if r not in ("planner", "recorder")]
        # every kind of process is killed once first (planner, one robot of each type, recorder),
        # in random order; then targets are drawn at random
        cover = [k for k in self.args.kill_targets if k != "robot"]
        if "robot" in self.args.kill_targets:
            for rtype in sorted(set(self.agents.values())):
                cover.append(self.rng.choice([a for a, t in self.agents.items() if t == rtype]))
        self.rng.shuffle(cover)
        kills = 0
        while not self._stop.is_set() and not (self.args.max_kills and kills >= self.args.max_kills):
            gap = self.rng.expovariate(1.0 / self.args.kill_every)
            if self._stop.wait(gap) or not self._chaos_on.is_set():
                continue
            if cover:
                target = cover.pop()
            else:
                kind = self.rng.choice(self.args.kill_targets)
                target = self.rng.choice(robots) if kind == "robot" else kind
            kills += 1
            m = self.procs[target]
            m.restarting = True
            try:
                if target == "planner":
                    self.planner_up = False
                stale = self.client.endpoints(target)  # still in the graph after the kill
                self.log("kill", target=target, pid=m.proc.pid, generation=m.generation)
                m.signal(signal.SIGKILL, 30)
                time.sleep(self.args.restart_delay)
                self.restart(target, "kill", stale)
            finally:
                m.restarting = False

    def _retry(self) -> None:
        """Re-publish tasks that got no status at all (see the module docstring), planner up only."""
        a = self.args
        if a.retry_after > 0 and self.planner_up and not self.procs["planner"].restarting:
            n = self.client.retry(a.retry_after, a.max_retries)
            if n:
                self.log("retry", tasks=n)

    def _watch(self) -> None:
        """Restart (and count) a process that died by itself."""
        for role, m in self.procs.items():
            if not m.restarting and not m.alive():
                rc = m.proc.returncode if m.proc else None
                self.unexpected.append({"t": round(self.client.now(), 1), "role": role, "rc": rc})
                self.log("unexpected-exit", target=role, rc=rc)
                if role == "planner":
                    self.planner_up = False
                self.restart(role, "unexpected exit", self.client.endpoints(role))

    # ------------------------------------------------------------------ the run
    def run(self) -> int:
        a = self.args
        threads = [threading.Thread(target=self._sampler, daemon=True)]
        if a.kill_every > 0 and not a.burst:
            threads.append(threading.Thread(target=self._chaos, daemon=True))
        try:
            self.log("start", domain=self.env["ROS_DOMAIN_ID"], out=str(self.out))
            for role in ("recorder", *[r for r in self.procs if r not in ("planner", "recorder")], "planner"):
                self.procs[role].start()
            for role in self.procs:
                if not self.ready(role, a.ready_timeout):
                    self.log("not-ready", target=role)
                    return self.finish(start_failed=role)
            self.log("fleet-ready")
            for t in threads:
                t.start()
            self._chaos_on.set()
            self._publish()
            self._chaos_on.clear()
            self.log("publishing-done", published=len(self.ledger.tasks))
            self._drain()
        except KeyboardInterrupt:
            self.log("interrupted")
        return self.finish()

    def _publish(self) -> None:
        a = self.args
        t0 = time.monotonic()
        if a.burst:
            for n in range(a.burst):
                self.client.publish(self.factory.make(n, time.time()), self.planner_up)
            self.log("burst-sent", tasks=a.burst, seconds=round(time.monotonic() - t0, 3))
            return
        total = int(a.rate * a.minutes * 60)
        for n in range(total):
            delay = t0 + n / a.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._watch()
            self._retry()
            self.client.publish(self.factory.make(n, time.time()), self.planner_up)
            if n and n % max(1, int(a.rate * 60)) == 0:
                self.log("progress", published=n, open=self.client.open_count())

    def _drain(self) -> None:
        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline and any(m.restarting for m in self.procs.values()):
            time.sleep(0.2)
        while time.monotonic() < deadline and self.client.open_count():
            self._watch()
            self._retry()
            time.sleep(0.5)
        self.log("drained", open=self.client.open_count())

    def finish(self, start_failed: str = "") -> int:
        self._stop.set()
        self._chaos_on.clear()
        order = ["planner", *[r for r in self.procs if r not in ("planner", "recorder")], "recorder"]
        for role in order:
            m = self.procs[role]
            if m.proc is not None:
                rc = m.signal(signal.SIGINT, self.args.stop_timeout)
                self.log("stopped", target=role, rc=rc)
            if role == "planner":
                time.sleep(3.0)  # the final statuses of a clean stop reach us
        return self.report(start_failed)

    def report(self, start_failed: str) -> int:
        a = self.args
        kills = [
            e["t"]
            for e in self.events
            if e["event"] in ("kill", "unexpected-exit") and e["target"] == "planner"
        ]
        with self.client.lock:
            summary = self.ledger.summary(kills)
        self.client.close()
        rss = self.rss.summary(a.warmup_fraction, tasks=summary["published"])
        report = {
            "config": vars(a),
            "domain": self.env["ROS_DOMAIN_ID"],
            "start_failed": start_failed,
            "unexpected_exits": self.unexpected,
            "events": self.events,
            "accounting": summary,
            "rss_summary": rss,
            "rss_samples": [list(s) for s in self.rss.samples],
        }
        write_json(self.out / "soak.json", report)
        if self.rss.samples:
            title = f"soak: {summary['published']} tasks, lost {summary['lost']}" + (
                f", burst {a.burst}" if a.burst else f", {a.rate:g}/s for {a.minutes:g} min"
            )
            write_png(self.out / "rss.png", self.rss, self.events, title)
        print("\n" + table(summary, rss, self.events), flush=True)
        print(f"\nreport: {self.out / 'soak.json'}  {self.out / 'rss.png'}  logs: {self.out / 'logs'}")
        unanswered = summary["unanswered_while_down"] if a.retry_after > 0 else 0
        failed = bool(summary["lost"] or unanswered or self.unexpected or start_failed)
        print(
            "SOAK FAILED" if failed else "SOAK PASSED",
            "(lost tasks, unexpected exits or start failure make it fail)" if failed else "",
            flush=True,
        )
        return 1 if failed else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=2.0, help="tasks per second")
    p.add_argument("--minutes", type=float, default=10.0, help="how long to publish")
    p.add_argument("--burst", type=int, default=0, help="publish this many tasks at once instead (no kills)")
    p.add_argument("--engine", choices=("sim", "llamacpp"), default="sim", help="planner engine")
    p.add_argument(
        "--planner-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra planner parameter (YAML value), e.g. engine_options={n_threads: 2}",
    )
    p.add_argument("--drones", type=int, default=3)
    p.add_argument("--arms", type=int, default=1)
    p.add_argument(
        "--robot-time-scale",
        type=float,
        default=0.1,
        help="robots' sim time scale (0.1: motions take a tenth of the modelled time)",
    )
    p.add_argument("--kill-every", type=float, default=60.0, help="mean seconds between kill -9 (0: none)")
    p.add_argument(
        "--kill-targets",
        type=lambda v: [t.strip() for t in v.split(",") if t.strip()],
        default=["planner", "robot", "recorder"],
        help="comma-separated: what may be killed (planner, robot, recorder)",
    )
    p.add_argument(
        "--max-kills",
        type=int,
        default=0,
        help="stop killing after this many kills (0: no limit); 4 = every process kind once "
        "(planner, a drone, the arm, the recorder), then a long last generation of each to read "
        "its memory trend from",
    )
    p.add_argument("--restart-delay", type=float, default=3.0, help="seconds a killed process stays down")
    p.add_argument(
        "--retry-after",
        type=float,
        default=20.0,
        help="re-publish a task with no status at all after this many seconds (0: never)",
    )
    p.add_argument("--max-retries", type=int, default=5, help="re-publications per task at most")
    p.add_argument("--drain", type=float, default=180.0, help="seconds to wait for the last final statuses")
    p.add_argument("--sample-period", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument(
        "--warmup-fraction",
        type=float,
        default=0.2,
        help="memory growth is measured after this fraction of each process's lifetime",
    )
    p.add_argument("--ready-timeout", type=float, default=120.0, help="seconds a (re)started node may take")
    p.add_argument("--stop-timeout", type=float, default=30.0, help="seconds a node gets after SIGINT")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="", help="report directory (default soak_<date>_<time>)")
    a = p.parse_args(argv)
    if a.rate <= 0 or a.minutes <= 0 or a.drones < 0 or a.arms < 0 or a.drones + a.arms == 0:
        p.error("--rate and --minutes must be > 0 and there must be at least one robot")
    if a.burst < 0 or a.kill_every < 0 or a.max_kills < 0 or not math.isfinite(a.rate):
        p.error("--burst, --kill-every and --max-kills must be >= 0")
    bad = set(a.kill_targets) - {"planner", "robot", "recorder"}
    if bad or not a.kill_targets:
        p.error(f"--kill-targets must name some of planner, robot, recorder (got {sorted(bad)})")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out or datetime.now().strftime("soak_%Y%m%d_%H%M%S")).resolve()
    if out.exists() and any(out.iterdir()):
        print(f"make soak: error: {out} exists and is not empty", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    return Soak(args, out).run()


if __name__ == "__main__":
    sys.exit(main())
