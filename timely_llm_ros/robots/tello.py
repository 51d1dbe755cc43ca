"""Real Ryze Tello backend: MiniSpec skills → Tello SDK commands over djitellopy (:mod:`.tello_link`).

Mapping (Ryze Tello SDK 2.0 user guide):

=========  ==========================  =====================================================
skill      SDK command(s)              notes
=========  ==========================  =====================================================
mf mb      ``forward x`` ``back x``    x in cm; a value below the SDK minimum (20, only
ml mr      ``left x`` ``right x``      possible from a variable) is raised to 20 and noted;
mu md      ``up x`` ``down x``         long moves are split into equal parts (see below)
tc tu      ``cw x`` ``ccw x``          x in 1..360 degrees (else the segment fails); split too
d          (none; hovers)              waits locally; keep-alive continues
l t rp     (none)                      log / plan time / re-plan are handled on the robot side
others     —                           perception and camera skills (iv s sa ox oy ow oh od p g
                                       tp): the segment FAILS before anything moves, with reason
=========  ==========================  =====================================================

Splitting: djitellopy waits 7 s for a reply; a motion that lasts longer is re-sent while the drone
still moves (with the fitted models: up/down from ~292 cm, ``cw 360`` ≈ 6.7 s is close). Every command is therefore
split so that the fitted execution-time model (``config/exec_time/drone.yaml``) predicts at most
``max_command_s`` (default 5 s) per part: up/down ≤ 255 cm, horizontal ≤ 442 cm, turns ≤ 255°.

Interrupt (:meth:`RobotBackend.interrupt`: the planner ended the task while it flies): ``stop`` is
sent at once, without waiting behind the command in flight — Tello SDK 2.0 "stop: hovers in the
air; works at any time" — and the segment fails with the reason; no further command of it is sent.

Take-off happens before the first segment runs (the node stays on the ground until it has work),
and again if the state stream shows the drone landed by itself. :meth:`TelloBackend.close` lands.

Keep-alive: the drone lands after 15 s without a command. :meth:`TelloBackend.idle` (called by the
node while it waits for segments) and long ``d`` delays send ``battery?`` once nothing was sent
for ``keepalive_s``. A query instead of ``command``: its numeric answer cannot be confused with a
late ``ok``, so every keep-alive also checks that replies are in sync.

Retries: an ``error`` reply (the drone refused, nothing moved) is re-sent up to ``retry_count``
sends in all. A missing reply is waited for (``late_reply_s``) but never blindly re-sent; if still
none, the state stream decides: height for up/down/take-off, yaw for turns — moved: accept; did not
move: re-send; horizontal moves cannot be verified, so the segment fails with that reason.
"""

from __future__ import annotations

import math
import time
from typing import Any

from timely_llm_ros.core.exectime import ExecTimeModel, load_exec_time_model
from timely_llm_ros.core.skills.model import SkillCall
from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.robots.base import RobotBackend, TaskContext
from timely_llm_ros.robots.minispec import Call, SkillFailure
from timely_llm_ros.robots.tello_link import TelloLink, is_number_reply, is_status_reply

MOVES = {"mf": "forward", "mb": "back", "ml": "left", "mr": "right", "mu": "up", "md": "down"}
TURNS = {"tc": "cw", "tu": "ccw"}
LOCAL = {"d", "l", "t", "rp"}
SUPPORTED = set(MOVES) | set(TURNS) | LOCAL
SDK_MOVE_MIN, SDK_MOVE_MAX = 20, 500  # cm (Tello SDK)
SDK_TURN_MIN, SDK_TURN_MAX = 1, 360  # degrees
TAKEOFF_TIMEOUT_S = 20  # djitellopy's TAKEOFF_TIMEOUT


def max_part(model: ExecTimeModel, skill: str, lo: int, hi: int, budget_s: float) -> int:
    """Largest argument in lo..hi whose modelled time is within ``budget_s`` (at least ``lo``)."""
    best = lo
    for v in range(lo, hi + 1):
        if model.estimate("drone", [SkillCall(skill, (v,), "")]).minimum <= budget_s:
            best = v
    return best


def split(total: int, part_max: int) -> list[int]:
    """``total`` in as few near-equal parts as possible, each ≤ ``part_max``."""
    n = max(1, math.ceil(total / part_max))
    base, extra = divmod(total, n)
    return [base + 1] * extra + [base] * (n - extra)


class TelloBackend(RobotBackend):
    kind = "tello"

    def __init__(
        self,
        skill_set: SkillSet,
        *,
        host: str = "192.168.10.1",
        response_timeout_s: float = 7.0,
        retry_count: int = 3,
        keepalive_s: float = 5.0,
        late_reply_s: float = 5.0,
        max_command_s: float = 5.0,
        retry_delay_s: float = 0.5,
        state_timeout_s: float = 2.0,
        link: TelloLink | None = None,
        exec_model: ExecTimeModel | None = None,
    ) -> None:
        super().__init__(skill_set)
        if skill_set.robot_type != "drone" or skill_set.language != "minispec":
            raise ValueError(f"the tello backend runs MiniSpec drone plans, not skill set {skill_set.name!r}")
        if not 0 < keepalive_s < 15:
            raise ValueError(
                f"keepalive_s must be in (0, 15): the Tello lands after 15 s idle, got {keepalive_s}"
            )
        if retry_count < 1:
            raise ValueError(f"retry_count must be >= 1 (number of sends), got {retry_count}")
        self.host = host
        self.response_timeout_s = float(response_timeout_s)
        self.retry_count = int(retry_count)
        self.keepalive_s = float(keepalive_s)
        self.late_reply_s = float(late_reply_s)
        self.retry_delay_s = float(retry_delay_s)
        self.state_timeout_s = float(state_timeout_s)
        model = exec_model or load_exec_time_model()
        self.part_max = {
            "horizontal": max_part(model, "mf", SDK_MOVE_MIN, SDK_MOVE_MAX, max_command_s),
            "vertical": max_part(model, "mu", SDK_MOVE_MIN, SDK_MOVE_MAX, max_command_s),
            "turn": max_part(model, "tc", SDK_TURN_MIN, SDK_TURN_MAX, max_command_s),
        }
        self.link = link
        self.airborne = False
        self.counters = {
            "commands": 0,
            "error_replies": 0,
            "timeouts": 0,
            "late_replies": 0,
            "resends": 0,
            "keepalives": 0,
            "keepalive_failures": 0,
            "takeoffs": 0,
            "stops": 0,
        }

    # -- lifecycle
    def start(self) -> None:
        if self.link is None:
            self.link = TelloLink(self.host)
        try:
            self.control("command", kind="connect")
        except SkillFailure as exc:
            raise RuntimeError(f"cannot connect to the Tello at {self.host}: {exc.reason}") from None
        if not self.link.wait_state(self.state_timeout_s):
            raise RuntimeError(
                f"no state packet from the Tello at {self.host} within {self.state_timeout_s:g} s "
                "after 'command' (is UDP port 8890 reachable?)"
            )

    def unsupported(self, names: set[str]) -> str | None:
        bad = sorted(names - SUPPORTED)
        if not bad:
            return None
        return (
            f"the tello backend cannot run {', '.join(bad)}: perception and camera skills need a vision "
            "pipeline this driver does not have (it never guesses their results); nothing was executed"
        )

    def begin_segment(self, ctx: TaskContext) -> None:
        super().begin_segment(ctx)
        if self.airborne and self._height() == 0:
            self.notes.append("the drone had landed by itself; taking off again")
            self.airborne = False
        if not self.airborne:
            self.control("takeoff", kind="takeoff", timeout=TAKEOFF_TIMEOUT_S)
            self.airborne = True
            self.counters["takeoffs"] += 1

    def halt(self) -> None:
        if self.link is not None and self.airborne:
            self.counters["stops"] += 1
            self.link.send_nowait("stop")

    @property
    def _link(self) -> TelloLink:
        """The UDP link of a started backend (every command path runs after :meth:`start`)."""
        assert self.link is not None
        return self.link

    def idle(self) -> None:
        if self.link is None or self.stop_event.is_set():
            return
        if time.monotonic() - self.link.last_io >= self.keepalive_s:
            self.keepalive()

    def keepalive(self) -> None:
        """One ``battery?`` query; a missing or non-numeric answer is counted, not fatal."""
        self.counters["keepalives"] += 1
        reply = self._link.query("battery?", self.response_timeout_s)
        if reply is None or not is_number_reply(reply):
            self.counters["keepalive_failures"] += 1

    def close(self) -> None:
        if self.link is None:
            return
        try:
            if self.airborne:
                self.stop_event.clear()  # landing must not be cut short by the shutdown flag
                self.control("land", kind="land")
                self.airborne = False
        finally:
            self.link.close()

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counters)
        if self.link is not None:
            out.update(stale_replies=self.link.stale, shifted_replies=self.link.shifted)
        out["airborne"] = self.airborne
        return out

    # -- skills
    def execute(self, call: Call, args: tuple) -> Any:
        name = call.name
        if name in MOVES:
            dist = int(args[0])
            if dist <= 0:
                raise SkillFailure(f"{call.source}: distance {dist} cm must be positive")
            if dist < SDK_MOVE_MIN:
                self.notes.append(f"{call.source}: {dist} cm raised to the SDK minimum {SDK_MOVE_MIN} cm")
                dist = SDK_MOVE_MIN
            axis = "vertical" if name in ("mu", "md") else "horizontal"
            for part in split(dist, self.part_max[axis]):
                self.control(f"{MOVES[name]} {part}", kind=MOVES[name], amount=part)
            return None
        if name in TURNS:
            deg = int(args[0])
            if not SDK_TURN_MIN <= deg <= SDK_TURN_MAX:
                raise SkillFailure(
                    f"{call.source}: {deg} degrees is outside the SDK's {SDK_TURN_MIN}..{SDK_TURN_MAX}"
                )
            for part in split(deg, self.part_max["turn"]):
                self.control(f"{TURNS[name]} {part}", kind=TURNS[name], amount=part)
            return None
        if name == "d":
            self._hover(float(args[0]), call.source)
            return None
        if name == "t":
            return time.monotonic() - self.ctx.started
        if name in ("l", "rp"):
            return None
        raise SkillFailure(self.unsupported({name}) or f"{call.source}: not supported by the tello backend")

    def _hover(self, seconds: float, what: str) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.wait(min(left, 0.25), what)
            if time.monotonic() - self._link.last_io >= self.keepalive_s:
                self.keepalive()

    # -- one control command with retries and verification
    def control(self, command: str, *, kind: str, amount: int = 0, timeout: float | None = None) -> None:
        timeout = self.response_timeout_s if timeout is None else timeout
        before = self.link.state() if self.link is not None else {}
        sends = 0
        last = ""
        while sends < self.retry_count:
            if self.stop_event.is_set() and kind not in ("land", "connect"):
                raise SkillFailure(f"{command!r} not sent: the robot node is shutting down")
            if kind not in ("land", "connect"):
                self.check_interrupt(f"{command!r}")
            sends += 1
            self.counters["commands"] += 1
            reply = self._link.send(command, timeout)
            if kind not in ("land", "connect") and self.interrupted():
                self._settle_after_stop(1 if reply is None else 0)
                self.check_interrupt(f"{command!r} (the drone was told to stop and hover)")
            if reply is None:
                self.counters["timeouts"] += 1
                reply = self._late_reply()
                if reply is None:
                    moved = self._moved(kind, amount, before)
                    if moved is True:
                        self.notes.append(f"{command!r}: reply lost, the state stream shows it was executed")
                        return
                    if moved is False and sends < self.retry_count:
                        self.counters["resends"] += 1
                        self.notes.append(f"{command!r}: no reply and the drone did not move; re-sent")
                        continue
                    why = (
                        "the drone did not move"
                        if moved is False
                        else "this motion cannot be verified from the state stream, so it is not re-sent"
                    )
                    raise SkillFailure(
                        f"no reply to {command!r} within {timeout:g} + {self.late_reply_s:g} s; {why}"
                    )
                self.counters["late_replies"] += 1
                self.notes.append(f"{command!r}: late reply {reply!r}")
            if reply.strip().lower() == "ok":
                return
            last = reply
            if kind == "land" and self._height() == 0:
                return  # refused because already down (e.g. after an auto-land): landed is landed
            self.counters["error_replies"] += 1
            if sends < self.retry_count:
                if kind in ("land", "connect"):
                    time.sleep(self.retry_delay_s)  # must happen even while shutting down
                else:
                    self.wait(self.retry_delay_s, command)
        raise SkillFailure(f"the drone answered {last!r} to {command!r} {sends} time(s)")

    def _settle_after_stop(self, answered_none: int) -> None:
        """After ``stop`` cut a command short, two replies were due (the command's and stop's) and
        one was read; wait briefly for the rest so neither can answer a later command."""
        for _ in range(1 + answered_none):
            if self._link.wait_reply(1.0) is None:
                break
            self._link.stale += 1

    def _late_reply(self) -> str | None:
        """Wait for a late reply; skip replies that cannot answer a control command (shifted)."""
        deadline = time.monotonic() + self.late_reply_s
        while True:
            reply = self._link.wait_reply(max(deadline - time.monotonic(), 0.0))
            if reply is None or is_status_reply(reply):
                return reply
            self._link.shifted += 1  # e.g. a number: the answer to an earlier query

    def _height(self) -> int | None:
        h = self.link.state().get("h") if self.link is not None else None
        return h if isinstance(h, int) else None

    def _moved(self, kind: str, amount: int, before: dict) -> bool | None:
        """Did the timed-out command take effect, judging by the state stream? None: cannot tell."""
        time.sleep(0.3)  # let a fresh state packet arrive
        after = self._link.state()
        if kind in ("up", "down"):
            if "h" not in before or "h" not in after:
                return None
            return abs(after["h"] - before["h"]) >= amount / 2
        if kind in ("cw", "ccw"):
            if "yaw" not in before or "yaw" not in after:
                return None
            delta = abs((after["yaw"] - before["yaw"] + 180) % 360 - 180)
            return delta >= min(amount, 360 - amount) / 2 if amount != 360 else None
        if kind == "connect":
            return False  # 'command' moves nothing: re-sending it is always safe
        if kind == "takeoff":
            return after.get("h", 0) > 0 if "h" in after else None
        if kind == "land":
            return after.get("h", 1) == 0 if "h" in after else None
        return None
