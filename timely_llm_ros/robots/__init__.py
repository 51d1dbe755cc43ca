"""Robot backends and plan interpretation, without ROS (the robot nodes in ``nodes/`` wrap them).

* :mod:`.minispec` — streaming MiniSpec interpreter (and the flat ``call`` language of the arms);
* :mod:`.runner` — per-robot segment ordering and execution with outcomes;
* :mod:`.sim` — simulated drone/arm: execution-time models in wall time, perception from the scene;
* :mod:`.tello` / :mod:`.tello_link` — a real Ryze Tello through djitellopy 2.5.0;
* :mod:`.tello_emulator` — a Tello SDK emulator over UDP for tests.
"""

from __future__ import annotations

BACKENDS = ("sim", "tello")
