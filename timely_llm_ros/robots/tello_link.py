"""Command/reply exchange with a Ryze Tello over djitellopy 2.5.0, robust to its known pitfalls.

djitellopy (``Tello``) owns the UDP sockets (it binds 8889 and 8890 on all interfaces), the
receiver threads and the state-packet parser; this module uses those and replaces the retry logic
of ``send_control_command``, because of djitellopy 2.5.0 behaviours that matter for a driver
(checked against :mod:`.tello_emulator`):

* a command that times out is **re-sent** by djitellopy even though the drone may still be moving
  (a doubled motion), and the late ``ok`` then answers the *next* command, shifting every later
  reply by one. Here a timed-out command is never re-sent blindly: :meth:`TelloLink.wait_reply`
  waits for the late reply first, and the caller re-sends only when the state stream proves the
  drone did not move.
* replies that arrive while no command is outstanding are stale: they are drained (and counted)
  before every new command, so one late reply cannot shift the ones after it.
* a reply that cannot answer the command (a number for a control command, ``ok``/``error`` for a
  query) is a shifted reply: it is counted, discarded, and the real answer is waited for — this is
  how the link resynchronises.
* the 0.1 s spacing between commands is enforced here (djitellopy's check is ineffective).
* typed queries (``query_height`` ...) are not used: firmware answers like ``8dm`` break them; the
  state stream (10 Hz) is read instead.

Uses ``Tello.send_command_with_return`` (one send, one reply or a timeout message) and the reply
list of ``Tello.get_own_udp_object()``; both are part of djitellopy 2.5.0, the pinned version.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

TIMEOUT_PREFIX = "Aborting command"  # djitellopy's text when no reply came within the timeout
MIN_INTERVAL_S = 0.1  # djitellopy's TIME_BTW_COMMANDS
_NUMBER_RE = re.compile(r"^-?\d+(\.\d+)?$")


def is_number_reply(reply: str) -> bool:
    return bool(_NUMBER_RE.match(reply.strip()))


def is_status_reply(reply: str) -> bool:
    r = reply.strip().lower()
    return r == "ok" or r.startswith("error")


class TelloLink:
    """One drone's command channel and state stream (a djitellopy ``Tello`` underneath)."""

    def __init__(self, host: str = "192.168.10.1", *, quiet: bool = True) -> None:
        try:
            from djitellopy import Tello
        except ImportError as exc:  # djitellopy is an optional dependency (the sim needs none)
            raise RuntimeError(
                f"the tello backend needs djitellopy 2.5.0 (pip install djitellopy==2.5.0): {exc}"
            ) from None
        if quiet:
            import logging

            Tello.LOGGER.setLevel(logging.WARNING)
        try:
            self.tello = Tello(host=host, retry_count=1)
        except OSError as exc:
            raise RuntimeError(
                f"cannot open the Tello UDP ports 8889/8890 ({exc}); is another Tello driver "
                "running on this machine (djitellopy binds them on all interfaces)?"
            ) from None
        self.host = host
        self.last_io = 0.0  # monotonic time of the last reply (or send) on this link
        self.stale = 0  # replies drained while no command was outstanding
        self.shifted = 0  # replies that could not answer their command
        self.log: list[tuple[str, str | None]] = []  # (command, reply or None) for diagnostics

    # -- replies
    def _replies(self) -> list:
        return self.tello.get_own_udp_object()["responses"]

    def drain(self) -> list[str]:
        """Remove replies nobody waits for (late answers); returns them decoded."""
        out = []
        replies = self._replies()
        while replies:
            out.append(_decode(replies.pop(0)))
        self.stale += len(out)
        return out

    def wait_reply(self, timeout: float) -> str | None:
        """Next reply within ``timeout`` seconds, without sending anything (None: none came)."""
        deadline = time.monotonic() + timeout
        replies = self._replies()
        while time.monotonic() < deadline:
            if replies:
                self.last_io = time.monotonic()
                return _decode(replies.pop(0))
            time.sleep(0.02)
        return None

    # -- commands
    def send(self, command: str, timeout: float) -> str | None:
        """Send ``command`` once; its reply, or None when none came within ``timeout``.

        Stale replies are drained first; the minimum spacing since the last exchange is kept.
        """
        gap = time.monotonic() - self.last_io
        if gap < MIN_INTERVAL_S:
            time.sleep(MIN_INTERVAL_S - gap)
        self.drain()  # after the spacing: a reply arriving during it is stale too
        self.last_io = time.monotonic()
        reply = self.tello.send_command_with_return(command, timeout=max(1, int(math.ceil(timeout))))
        self.last_io = time.monotonic()
        if reply.startswith(TIMEOUT_PREFIX):
            self.log.append((command, None))
            return None
        self.log.append((command, reply))
        return reply

    def send_nowait(self, command: str) -> None:
        """Send ``command`` without waiting for its reply (``stop`` while another command waits).

        Its reply then answers the command in flight or arrives stale; both are handled: the caller
        of the interrupted command knows it was interrupted, and stale replies are drained first.
        """
        self.tello.send_command_without_return(command)
        self.log.append((command, None))

    def query(self, command: str, timeout: float) -> str | None:
        """A read command (``battery?``): skips shifted ``ok``/``error`` replies; None on timeout."""
        reply = self.send(command, timeout)
        deadline = time.monotonic() + timeout
        while reply is not None and is_status_reply(reply):
            self.shifted += 1
            reply = self.wait_reply(max(deadline - time.monotonic(), 0.0))
        return reply

    # -- state stream
    def state(self) -> dict[str, Any]:
        return dict(self.tello.get_current_state())

    def wait_state(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.tello.get_current_state():
                return True
            time.sleep(0.05)
        return bool(self.tello.get_current_state())

    def close(self) -> None:
        """Forget this drone in djitellopy (its sockets stay bound for the life of the process)."""
        self.tello.is_flying = False  # we land ourselves; keep end() from sending another land
        self.tello.end()


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return "<undecodable reply>"
