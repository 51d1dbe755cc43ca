"""Can Qt open a window here? Checked before ``QApplication`` exists, because Qt cannot say it later.

Why: PyQt5's wheel carries Qt but not the X11/xcb system libraries its ``xcb`` platform plugin links
to. On a plain Debian 12 three of them are missing (``libxcb-icccm4 libxcb-keysyms1
libxcb-xinerama0``: checked with ``ldd`` on PyQt5 5.15's ``libqxcb.so`` and under Xvfb), and Qt then
aborts the process in ``QApplication()`` ("Could not load the Qt platform plugin "xcb"", SIGABRT,
rc 134) — no Python code runs to explain it. :func:`problem` runs ``ldd`` on the plugin Qt would
load and names the Debian packages to install instead; a missing ``DISPLAY`` is reported likewise.

No Qt import at module level: ``tools/bootstrap.py`` reads :data:`XCB_SYSTEM_LIBS` from this file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

# Every system library (soname -> Debian 12 package) that PyQt5 5.15's xcb platform plugin
# (``libqxcb.so`` + ``libQt5XcbQpa.so.5``) needs, from ``ldd`` on both. The first three are the ones a
# plain Debian lacks; the rest come with most desktops (and with Xvfb, fontconfig or libgl1).
XCB_SYSTEM_LIBS: dict[str, str] = {
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libGL.so.1": "libgl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libdbus-1.so.3": "libdbus-1-3",
}
HEADLESS_HINT = "or run headless: QT_QPA_PLATFORM=offscreen with --screenshot"


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames ``ldd`` reports as ``not found``, in its order, each once."""
    out: list[str] = []
    for line in ldd_output.splitlines():
        name, sep, rest = line.strip().partition("=>")
        if sep and rest.strip() == "not found" and name.strip() not in out:
            out.append(name.strip())
    return out


def install_hint(sonames: list[str]) -> str:
    """``sudo apt-get install …`` for the sonames (Debian package names; unknown ones as they are)."""
    packages = list(dict.fromkeys(XCB_SYSTEM_LIBS.get(s, s) for s in sonames))
    return "sudo apt-get install " + " ".join(packages)


def platform_name(env: Mapping[str, str] | None = None) -> str:
    """The platform plugin Qt will load: ``QT_QPA_PLATFORM`` (its name before any ``:options``), else
    ``xcb`` on Linux (PyQt5's default there)."""
    env = os.environ if env is None else env
    name = env.get("QT_QPA_PLATFORM", "").split(":", 1)[0].strip()
    return name or ("xcb" if sys.platform.startswith("linux") else "")


def _xcb_plugin() -> Path | None:
    from python_qt_binding.QtCore import QLibraryInfo

    base = Path(QLibraryInfo.location(QLibraryInfo.PluginsPath)) / "platforms"
    plugin = base / "libqxcb.so"
    return plugin if plugin.is_file() else None


def problem(env: Mapping[str, str] | None = None) -> str:
    """Why Qt's platform plugin cannot start here, with the fix; '' when it can (or we cannot tell:
    only the ``xcb`` plugin on Linux is checked, and only where ``ldd`` exists)."""
    env = os.environ if env is None else env
    if platform_name(env) != "xcb":
        return ""
    if not env.get("DISPLAY"):
        return f"no X display (DISPLAY is not set): start it from a desktop session, `ssh -X`, or xvfb-run; {HEADLESS_HINT}"
    plugin = _xcb_plugin()
    ldd = shutil.which("ldd")
    if plugin is None or ldd is None:
        return ""
    lib_dir = plugin.parents[2] / "lib"  # the wheel's Qt5/lib, where libQt5XcbQpa.so.5 lives
    ld_path = os.pathsep.join(p for p in (str(lib_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    try:
        proc = subprocess.run(
            [ldd, str(plugin)],
            capture_output=True,
            text=True,
            timeout=30,
            env={**env, "LD_LIBRARY_PATH": ld_path},
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    missing = missing_libraries(proc.stdout)
    if not missing:
        return ""
    return (
        f"Qt's xcb platform plugin cannot load: {', '.join(missing)} not found. "
        f"Install the system libraries: `{install_hint(missing)}` ({HEADLESS_HINT})"
    )
