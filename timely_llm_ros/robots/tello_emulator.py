"""A Ryze Tello SDK emulator over UDP, for testing the tello backend without a drone.

Faithful to the Ryze Tello SDK 2.0 user guide and to djitellopy 2.5.0's observed behaviour:

* commands arrive on UDP 8889 and each gets one reply, ``ok`` or ``error``, sent to the command's
  sender **after the action finished** (motions take time, so do their replies); ``command`` enters
  SDK mode, anything else before it is answered ``error``;
* state packets go to the client's UDP 8890 at 10 Hz once in SDK mode, in the SDK 1.3 format
  ``pitch:%d;roll:%d;yaw:%d;vgx:%d;vgy:%d;vgz:%d;templ:%d;temph:%d;tof:%d;h:%d;bat:%d;baro:%.2f;
  time:%d;agx:%.2f;agy:%.2f;agz:%.2f;``;
* ranges: up/down/left/right/forward/back 20–500 cm, cw/ccw 1–360°, speed 10–100, ``go x y z
  speed`` ±500 and 10–100; out of range, malformed, unknown, or a motion while landed → ``error``;
* it lands by itself after 15 s without a command (``idle_land_s``);
* motion durations are TimelyLLM's models fitted on a real Tello (``config/exec_time/drone.yaml``):
  moves 0.0072·v + 1.8144 s, up/down the cubic, turns 0.0165·v + 0.784 s. Take-off (4 s), landing
  (3 s), ``go`` (distance / speed + 1 s) and queries (20 ms) are our assumptions: no public data.
* firmware-style query answers (``height?`` → ``8dm``, ``time?`` → ``11s``, ``temp?`` → ``63~66C``);
* commands are handled one at a time in arrival order (a command re-sent during a motion waits
  and is then executed again — the doubled motion the notes warn about); ``emergency`` (motors
  off) and ``stop`` (SDK 2.0: hover where it is, "works at any time") act at once: the motion in
  progress ends where it is and its reply is ``error``.

Test hooks (fault injection): ``errors`` answers ``error`` to the first N commands with a prefix
(without acting); ``drop_replies`` executes but never answers the first N; ``slow`` gives a prefix a
fixed duration; ``spurious_ok`` sends an extra unsolicited ``ok`` after answering a prefix (a reply
shift). Every datagram, reply and auto-landing is written to a JSON-lines log.

Run: ``python -m timely_llm_ros.robots.tello_emulator --host 192.168.10.1 --log emu.jsonl``.
It prints ``READY`` once its socket is bound, and stops on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from timely_llm_ros.core.exectime import ExecTimeModel, load_exec_time_model
from timely_llm_ros.core.skills.model import SkillCall

MOVE_SKILL = {"forward": "mf", "back": "mb", "left": "ml", "right": "mr", "up": "mu", "down": "md"}
TURN_SKILL = {"cw": "tc", "ccw": "tu"}
TAKEOFF_S = 4.0  # assumption (see module docstring)
LAND_S = 3.0
QUERY_S = 0.02
TAKEOFF_HEIGHT_CM = 80  # a Tello hovers at about 0.8 m after take-off (assumption)


@dataclass
class Faults:
    errors: dict[str, int] = field(default_factory=dict)  # prefix -> how many to refuse
    drop_replies: dict[str, int] = field(default_factory=dict)  # prefix -> how many to leave unanswered
    slow: dict[str, float] = field(default_factory=dict)  # prefix -> fixed duration (s, unscaled)
    spurious_ok: set[str] = field(default_factory=set)  # prefixes followed by an extra 'ok'

    @staticmethod
    def _take(table: dict[str, int], cmd: str) -> bool:
        for prefix, n in table.items():
            if cmd.startswith(prefix) and n > 0:
                table[prefix] = n - 1
                return True
        return False


class TelloEmulator:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 8889,
        state_port: int = 8890,
        *,
        time_scale: float = 1.0,
        idle_land_s: float = 15.0,
        faults: Faults | None = None,
        log_path: str | None = None,
        exec_model: ExecTimeModel | None = None,
    ) -> None:
        self.model = exec_model or load_exec_time_model()
        self.time_scale = time_scale
        self.idle_land_s = idle_land_s
        self.state_port = state_port
        self.faults = faults or Faults()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.sock.settimeout(0.2)
        self._log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
        self._log_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._abort = threading.Event()
        self.lock = threading.Lock()
        # drone state
        self.sdk = False
        self.client: str | None = None
        self.flying = False
        self.h = 0
        self.yaw = 0
        self.x = 0.0
        self.y = 0.0
        self.v = (0, 0, 0)
        self.bat = 87
        self.speed = 100
        self.motor_s = 0.0
        self.busy_until = 0.0
        self.last_rx = time.monotonic()
        self.auto_landings = 0
        self.stops = 0
        self._threads = [
            threading.Thread(target=f, daemon=True) for f in (self._rx, self._worker, self._state)
        ]

    # -- lifecycle
    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        for t in self._threads:
            t.join(timeout=2)
        self.log(
            "stop",
            flying=self.flying,
            h=self.h,
            yaw=self.yaw,
            x=round(self.x, 1),
            y=round(self.y, 1),
            auto_landings=self.auto_landings,
            stops=self.stops,
        )
        self.sock.close()
        if self._log:
            self._log.close()

    def log(self, event: str, **kw: Any) -> None:
        if self._log is None:
            return
        with self._log_lock:
            self._log.write(json.dumps({"t": round(time.monotonic(), 4), "event": event, **kw}) + "\n")
            self._log.flush()

    # -- threads
    def _rx(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(1024)
            except TimeoutError:
                continue
            except OSError:
                return
            cmd = data.decode("utf-8", errors="replace").strip()
            with self.lock:
                self.last_rx = time.monotonic()
            self.log("rx", cmd=cmd, sender=addr[0])
            if cmd == "emergency" and self.sdk:
                self._abort.set()
                with self.lock:
                    self.flying, self.h, self.v = False, 0, (0, 0, 0)
                self._reply("ok", addr, cmd)
                continue
            if cmd == "stop" and self.sdk:  # SDK 2.0: hover in place, works at any time
                self._abort.set()
                with self.lock:
                    self.v = (0, 0, 0)
                    self.stops += 1
                self._reply("ok" if self.flying else "error", addr, cmd)
                continue
            self._queue.put((cmd, addr))

    def _worker(self) -> None:
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None:
                return
            cmd, addr = item
            self._abort.clear()
            if Faults._take(self.faults.errors, cmd):
                self._reply("error", addr, cmd, injected=True)
                continue
            reply = self._handle(cmd, addr)
            if Faults._take(self.faults.drop_replies, cmd):
                self.log("reply_dropped", cmd=cmd, reply=reply)
            else:
                self._reply(reply, addr, cmd)
            if any(cmd.startswith(p) for p in self.faults.spurious_ok):
                time.sleep(0.2)
                self._reply("ok", addr, cmd, spurious=True)

    def _state(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self.lock:
                idle = now - max(self.last_rx, self.busy_until)
                if self.flying and idle > self.idle_land_s and self._queue.empty():
                    self.flying, self.h, self.v = False, 0, (0, 0, 0)
                    self.auto_landings += 1
                    landed = True
                else:
                    landed = False
                if self.flying:
                    self.motor_s += 0.1
                client = self.client if self.sdk else None
                packet = self.state_packet()
            if landed:
                self.log("auto_land", idle_s=round(idle, 2))
            if client:
                try:
                    self.sock.sendto(packet.encode(), (client, self.state_port))
                except OSError:
                    pass

    def state_packet(self) -> str:
        vgx, vgy, vgz = self.v
        tof = self.h + 10 if self.flying else 10
        return (
            f"pitch:0;roll:0;yaw:{self.yaw};vgx:{vgx};vgy:{vgy};vgz:{vgz};templ:60;temph:63;tof:{tof};"
            f"h:{self.h};bat:{self.bat};baro:{100 + self.h / 100:.2f};time:{int(self.motor_s)};"
            "agx:0.00;agy:0.00;agz:-1000.00;\r\n"
        )

    def _reply(self, text: str, addr: tuple, cmd: str, **kw: Any) -> None:
        self.log("reply", cmd=cmd, reply=text, **kw)
        try:
            self.sock.sendto(text.encode(), addr)
        except OSError:
            pass

    # -- commands
    def _duration(self, cmd: str, default: float) -> float:
        for prefix, seconds in self.faults.slow.items():
            if cmd.startswith(prefix):
                return seconds
        return default * self.time_scale

    def _modelled(self, skill: str, v: int) -> float:
        return self.model.estimate("drone", [SkillCall(skill, (v,), "")]).minimum

    def _act(
        self,
        cmd: str,
        seconds: float,
        *,
        dh: int = 0,
        dyaw: int = 0,
        dx: float = 0.0,
        dy: float = 0.0,
        vel: tuple = (0, 0, 0),
    ) -> bool:
        """Carry out a motion over ``seconds`` (state updated as it goes); False when aborted."""
        with self.lock:
            h0, yaw0, x0, y0 = self.h, self.yaw, self.x, self.y
            self.busy_until = time.monotonic() + seconds
            self.v = vel
        start = time.monotonic()
        while True:
            frac = 1.0 if seconds <= 0 else min((time.monotonic() - start) / seconds, 1.0)
            if self._abort.is_set():
                return False
            with self.lock:
                self.h = max(int(round(h0 + dh * frac)), 0)
                self.yaw = int(round((yaw0 + dyaw * frac + 180) % 360 - 180))
                self.x, self.y = x0 + dx * frac, y0 + dy * frac
            if frac >= 1.0:
                break
            time.sleep(min(0.05, max(seconds, 0.0)))
        with self.lock:
            self.v = (0, 0, 0)
            self.busy_until = time.monotonic()
        return True

    def _handle(self, cmd: str, addr: tuple) -> str:
        parts = cmd.split()
        if not parts:
            return "error"
        word, args = parts[0], parts[1:]
        if word == "command":
            with self.lock:
                self.sdk = True
                self.client = addr[0]
            time.sleep(QUERY_S)
            return "ok"
        if not self.sdk:
            return "error"
        if word.endswith("?"):
            time.sleep(QUERY_S)
            return self._query(word)
        ints = _ints(args)
        if word == "takeoff" and not args:
            if self.flying:
                return "error"
            ok = self._act(cmd, self._duration(cmd, TAKEOFF_S), dh=TAKEOFF_HEIGHT_CM, vel=(0, 0, -20))
            with self.lock:
                self.flying = ok or self.flying
            return "ok" if ok else "error"
        if word == "land" and not args:
            if not self.flying:
                return "error"
            ok = self._act(cmd, self._duration(cmd, LAND_S), dh=-self.h, vel=(0, 0, 20))
            with self.lock:
                self.flying = False
                self.h = 0
            return "ok" if ok else "error"
        if word in ("streamon", "streamoff", "keepalive", "motoron", "motoroff") and not args:
            return "ok"
        if word == "speed" and ints and len(ints) == 1 and 10 <= ints[0] <= 100:
            self.speed = ints[0]
            return "ok"
        if word in MOVE_SKILL:
            if ints is None or len(ints) != 1 or not 20 <= ints[0] <= 500 or not self.flying:
                return "error"
            v = ints[0]
            secs = self._duration(cmd, self._modelled(MOVE_SKILL[word], v))
            rad = math.radians(self.yaw)
            fwd = {"forward": 1, "back": -1}.get(word, 0)
            side = {"right": 1, "left": -1}.get(word, 0)
            dx = v * (fwd * math.cos(rad) - side * math.sin(rad))
            dy = v * (fwd * math.sin(rad) + side * math.cos(rad))
            dh = {"up": v, "down": -min(v, max(self.h - 10, 0))}.get(word, 0)
            ok = self._act(
                cmd,
                secs,
                dh=dh,
                dx=dx if not dh else 0.0,
                dy=dy if not dh else 0.0,
                vel=(0, 0, -10 if word == "up" else 10 if word == "down" else 0),
            )
            return "ok" if ok else "error"
        if word in TURN_SKILL:
            if ints is None or len(ints) != 1 or not 1 <= ints[0] <= 360 or not self.flying:
                return "error"
            v = ints[0]
            secs = self._duration(cmd, self._modelled(TURN_SKILL[word], v))
            ok = self._act(cmd, secs, dyaw=v if word == "cw" else -v)
            return "ok" if ok else "error"
        if word == "go" and ints and len(ints) == 4 and self.flying:
            x, y, z, spd = ints
            if (
                not (all(-500 <= c <= 500 for c in (x, y, z)) and 10 <= spd <= 100)
                or max(map(abs, (x, y, z))) < 20
            ):
                return "error"
            secs = self._duration(cmd, math.dist((0, 0, 0), (x, y, z)) / spd + 1.0)
            return "ok" if self._act(cmd, secs, dh=z, dx=x, dy=y) else "error"
        return "error"

    def _query(self, word: str) -> str:
        answers = {
            "battery?": str(self.bat),
            "height?": f"{self.h // 10}dm",
            "time?": f"{int(self.motor_s)}s",
            "temp?": "63~66C",
            "speed?": f"{self.speed:.1f}",
            "baro?": f"{100 + self.h / 100:.6f}",
            "tof?": f"{(self.h + 10) * 10}mm",
            "attitude?": f"pitch:0;roll:0;yaw:{self.yaw};",
            "wifi?": "90",
            "sdk?": "20",
            "sn?": "0TQZEMULATOR01",
        }
        return answers.get(word, "error")


def _ints(args: list[str]) -> list[int] | None:
    try:
        return [int(a) for a in args]
    except ValueError:
        return None


def _pairs(values: list[str], cast) -> dict:
    out = {}
    for v in values:
        prefix, sep, n = v.rpartition(":")
        if not sep or not prefix:
            raise argparse.ArgumentTypeError(f"expected PREFIX:VALUE, got {v!r}")
        out[prefix] = cast(n)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``python -m ...tello_emulator`` and of ``timely-llm tello-emulator``."""
    p.add_argument("--host", default="0.0.0.0", help="address to bind the command port on")
    p.add_argument("--port", type=int, default=8889)
    p.add_argument("--state-port", type=int, default=8890)
    p.add_argument("--time-scale", type=float, default=1.0, help="multiplies every action's duration")
    p.add_argument(
        "--idle-land-s", type=float, default=15.0, help="auto-land after this long without commands"
    )
    p.add_argument("--log", help="JSON-lines log of datagrams and replies")
    p.add_argument(
        "--error",
        action="append",
        default=[],
        metavar="PREFIX:N",
        help="answer 'error' to the first N commands starting with PREFIX",
    )
    p.add_argument(
        "--drop-reply",
        action="append",
        default=[],
        metavar="PREFIX:N",
        help="execute but never answer the first N commands starting with PREFIX",
    )
    p.add_argument(
        "--slow",
        action="append",
        default=[],
        metavar="PREFIX:SECONDS",
        help="commands starting with PREFIX take SECONDS (not scaled)",
    )
    p.add_argument(
        "--spurious-ok",
        action="append",
        default=[],
        metavar="PREFIX",
        help="send an extra unsolicited 'ok' after answering commands starting with PREFIX",
    )


def run(a: argparse.Namespace) -> int:
    try:
        faults = Faults(
            _pairs(a.error, int), _pairs(a.drop_reply, int), _pairs(a.slow, float), set(a.spurious_ok)
        )
    except (argparse.ArgumentTypeError, ValueError) as exc:
        print(f"tello_emulator: error: {exc}", file=sys.stderr)
        return 2
    try:
        emu = TelloEmulator(
            a.host,
            a.port,
            a.state_port,
            time_scale=a.time_scale,
            idle_land_s=a.idle_land_s,
            faults=faults,
            log_path=a.log,
        )
    except OSError as exc:
        print(f"tello_emulator: error: cannot bind {a.host}:{a.port}: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    emu.start()
    print("READY", flush=True)
    done.wait()
    emu.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tello_emulator", description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
