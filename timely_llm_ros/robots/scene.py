"""Scene descriptions: what a simulated robot "sees", parsed from a Task's ``scene`` string.

TimelyLLM's tasks carry the robot's current view as text (public workloads,
``timely_llm_ros/data/timelyllm/*.json``): ``[bottle_1 x:0.32 y:0.50 width:0.10 height:0.30]`` — one object
per entry, image coordinates 0..1 of its centre and its size as fractions of the image. Several
objects are comma-separated inside one bracket pair, or given as several bracket groups; ``[]`` is
an empty view. The sim backends answer perception skills (``iv``, ``ox``, ``ow``, ``od``...) from it,
so a simulated run is deterministic and needs no camera.

Object names are matched loosely, the way a planner refers to them: case-insensitive, spaces and
underscores equal, and a trailing instance number ignored (``'bottle'`` finds ``bottle_1``).

Optional keys beyond the public format (our extension): ``distance:<cm>`` for ``od``.
Malformed entries are not guessed at: :class:`SceneError` names the entry and what is wrong (the
public arm file has ``[apple:0.48 y:...]`` with the ``x`` key lost — that is an error, not an apple
at x 0.48; the robot fails a segment over it only when a skill actually asks about the scene).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

KEYS = {
    "x": "x",
    "y": "y",
    "width": "width",
    "w": "width",
    "height": "height",
    "h": "height",
    "distance": "distance",
    "d": "distance",
}


class SceneError(ValueError):
    """A scene string that cannot be parsed; the message quotes the bad entry."""


@dataclass(frozen=True)
class SceneObject:
    """One object in view: centre (x, y) and size as fractions of the image; distance in cm if known."""

    name: str
    x: float = 0.5
    y: float = 0.5
    width: float = 0.0
    height: float = 0.0
    distance: float | None = None


def object_key(name: str) -> str:
    """Loose identity of an object name: ``'Bottle 1'``, ``bottle_1`` and ``bottle`` give ``bottle``."""
    key = re.sub(r"[\s_]+", "_", str(name).strip().lower()).strip("_")
    return re.sub(r"_\d+$", "", key)


@dataclass
class Scene:
    """The objects currently in view (order kept as written)."""

    objects: list[SceneObject] = field(default_factory=list)

    def find(self, name: str) -> SceneObject | None:
        """The first object whose name matches ``name`` loosely (exact names win)."""
        for obj in self.objects:
            if obj.name == name:
                return obj
        key = object_key(name)
        for obj in self.objects:
            if object_key(obj.name) == key:
                return obj
        return None

    def names(self) -> list[str]:
        return [o.name for o in self.objects]

    def describe(self) -> str:
        """Plain-language listing, used as the sim answer to ``p``/``sa`` questions."""
        if not self.objects:
            return "nothing in view"
        return "in view: " + ", ".join(self.names())


_GROUP_RE = re.compile(r"\[([^\[\]]*)\]")


def parse_scene(text: str) -> Scene:
    """Parse a scene string (``""`` and ``"[]"`` are empty scenes); SceneError on malformed entries."""
    if not isinstance(text, str):
        raise SceneError(f"scene must be a string, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        return Scene()
    groups = _GROUP_RE.findall(stripped)
    rest = _GROUP_RE.sub("", stripped).strip(" ,\t\r\n")
    if not groups or rest:
        raise SceneError(
            f"scene {text!r} is not a list of [name x:.. y:.. width:.. height:..] entries"
            + (f" (unexpected text {rest!r})" if rest else "")
        )
    objects = []
    for group in groups:
        for entry in group.split(","):
            if entry.strip():
                objects.append(_parse_entry(entry.strip()))
    return Scene(objects)


def _parse_entry(entry: str) -> SceneObject:
    parts = entry.split()
    name = parts[0]
    if ":" in name:
        raise SceneError(f"scene entry {entry!r} does not start with an object name (got {name!r})")
    values: dict[str, float] = {}
    for part in parts[1:]:
        key, sep, raw = part.partition(":")
        if not sep or key.lower() not in KEYS:
            raise SceneError(
                f"scene entry {entry!r}: {part!r} is not one of {', '.join(sorted(set(KEYS)))} as key:value"
            )
        try:
            val = float(raw)
        except ValueError:
            raise SceneError(f"scene entry {entry!r}: {key} value {raw!r} is not a number") from None
        canon = KEYS[key.lower()]
        if not math.isfinite(val) or val < 0 or (canon != "distance" and val > 1):
            limit = ">= 0" if canon == "distance" else "within 0..1"
            raise SceneError(f"scene entry {entry!r}: {key}={raw} must be {limit}")
        values[canon] = val
    return SceneObject(name=name, **values)
