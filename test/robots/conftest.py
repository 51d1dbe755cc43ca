"""Fixtures for the robot tests: a private network-namespace pair for the Tello emulator.

djitellopy binds UDP 8889 and 8890 on *all* interfaces and sends to 192.168.10.1 (notes,
"Ryze Tello SDK and djitellopy"), so the fake drone cannot share a network stack with the driver.
The fixture creates two namespaces joined by a veth pair — the drone side 192.168.10.1/24, the
driver side 192.168.10.2/24 — each with its own loopback. Nothing is routed anywhere else: there is
no default route and no link to the host's interfaces, so no packet can leave the machine.
Processes started through :meth:`NetnsPair.popen` are stopped and both namespaces deleted at
teardown, also when the test fails. Where namespaces cannot be created (not root, no iproute2, no
CAP_SYS_ADMIN in a container) the tests are skipped with that reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest

DRONE_IP = "192.168.10.1"
HOST_IP = "192.168.10.2"
_counter = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


class NetnsPair:
    def __init__(self) -> None:
        n = next(_counter)
        tag = f"{os.getpid() % 100000}x{n}"
        self.drone_ns = f"tlr_drone_{tag}"
        self.host_ns = f"tlr_host_{tag}"
        self._veth = (f"tlv{tag}d", f"tlv{tag}h")  # interface names: at most 15 characters
        self._procs: list[subprocess.Popen] = []

    def create(self) -> None:
        d, h = self._veth
        _ip("netns", "add", self.drone_ns)
        _ip("netns", "add", self.host_ns)
        _ip("link", "add", d, "type", "veth", "peer", "name", h)
        _ip("link", "set", d, "netns", self.drone_ns)
        _ip("link", "set", h, "netns", self.host_ns)
        for ns, dev, addr in ((self.drone_ns, d, DRONE_IP), (self.host_ns, h, HOST_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def popen(self, ns: str, argv: list[str], **kw) -> subprocess.Popen:
        """Start ``argv`` inside namespace ``ns`` in its own process group (stopped at teardown)."""
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *argv], start_new_session=True, **kw)
        self._procs.append(proc)
        return proc

    def destroy(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)
        for ns in (self.drone_ns, self.host_ns):  # deleting a namespace removes its veth end too
            _ip("netns", "del", ns, check=False)


def _netns_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"tlr_probe_{os.getpid()}"
    res = _ip("netns", "add", probe, check=False)
    if res.returncode != 0:
        return f"'ip netns add' failed: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@pytest.fixture
def netns_pair() -> Iterator[NetnsPair]:
    reason = _netns_unavailable()
    if reason:
        pytest.skip(
            f"the Tello emulator needs its own network namespace (djitellopy binds the wildcard "
            f"address): {reason}"
        )
    pair = NetnsPair()
    try:
        pair.create()
        yield pair
    finally:
        pair.destroy()
