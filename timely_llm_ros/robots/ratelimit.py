"""Rate-limited warnings: one log line per kind of problem and period, with the count suppressed.

Why: a robot logged one warning per bad message, so anyone publishing garbage on its segment topic
could flood its log (and disk) at DDS speed. Every message is still answered (feedback) and counted;
only the log lines are limited. Pure Python, thread-safe, bounded in memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class LogLimiter:
    """``limiter(key, message)`` → the line to log now, or None while ``key`` is quiet.

    The first message of a key is logged at once; later ones at most every ``period`` seconds,
    prefixed with how many were suppressed since. At most ``max_keys`` keys are remembered.
    """

    def __init__(
        self, period: float = 10.0, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 256
    ) -> None:
        self.period = float(period)
        self.clock = clock
        self.max_keys = max_keys
        self.suppressed_total = 0
        self._keys: OrderedDict[str, list] = OrderedDict()  # key -> [last logged time, suppressed]
        self._lock = threading.Lock()

    def __call__(self, key: str, message: str) -> str | None:
        now = self.clock()
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None and now - entry[0] < self.period:
                entry[1] += 1
                self.suppressed_total += 1
                return None
            quiet = entry[1] if entry is not None else 0
            self._keys[key] = [now, 0]
            self._keys.move_to_end(key)
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
        if quiet:
            return f"{message} (and {quiet} more like it since the last such line)"
        return message
