"""Check package.xml's dependency keys against a ros/rosdistro checkout; write the checked list.

``rosdep install --from-paths src`` fails on the first key it cannot resolve ("Cannot locate rosdep
definition for [python3-lz4]"). A key resolves when it is a rosdep key (``rosdep/base.yaml``,
``rosdep/python.yaml``) or the name of a ROS package released in the target distro
(``<distro>/distribution.yaml``). This tool reads those files from a checkout of
https://github.com/ros/rosdistro and writes, for the keys package.xml uses and nothing else, where
each one resolves, with the checkout's commit and date:

    git clone --depth 1 https://github.com/ros/rosdistro /tmp/rosdistro
    python3 tools/rosdep_keys.py /tmp/rosdistro            # writes test/packaging/rosdep_keys.yaml

``test/packaging/test_package_xml.py`` then fails on any package.xml key that is not in that checked
list (a new dependency: run this tool again), so the check needs no network in CI. Exit status 1
when a key resolves nowhere (the list is still written, the key marked ``unresolved``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DISTROS = ("humble", "jazzy", "kilted")  # the distros the README says the package is written for
DEP_TAGS = ("depend", "build_depend", "buildtool_depend", "exec_depend", "test_depend")
OUT = ROOT / "test" / "packaging" / "rosdep_keys.yaml"


def package_keys(package_xml: Path) -> list[str]:
    """Every dependency key of a package.xml (all ``*depend`` tags), sorted, without duplicates."""
    root = ET.parse(package_xml).getroot()
    return sorted({e.text.strip() for e in root if e.tag in DEP_TAGS and e.text and e.text.strip()})


def released_packages(distribution_yaml: Path) -> set[str]:
    """ROS package names released in one distro (a repository without a package list is one package)."""
    data = yaml.safe_load(distribution_yaml.read_text(encoding="utf-8"))
    names: set[str] = set()
    for repo, entry in (data.get("repositories") or {}).items():
        release = (entry or {}).get("release")
        if release is not None:
            names |= set(release.get("packages") or [repo])
    return names


def resolve(keys: list[str], rosdistro: Path) -> dict[str, dict]:
    """key -> ``{rosdep: file}`` or ``{ros_package: [distros]}``, or ``{unresolved: true}``."""
    rosdep: dict[str, str] = {}
    for name in ("base.yaml", "python.yaml"):
        for key in yaml.safe_load((rosdistro / "rosdep" / name).read_text(encoding="utf-8")) or {}:
            rosdep.setdefault(key, f"rosdep/{name}")
    released = {d: released_packages(rosdistro / d / "distribution.yaml") for d in DISTROS}
    out: dict[str, dict] = {}
    for key in keys:
        if key in rosdep:
            out[key] = {"rosdep": rosdep[key]}
            continue
        distros = [d for d in DISTROS if key in released[d]]
        out[key] = {"ros_package": distros} if distros else {"unresolved": True}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rosdistro", type=Path, help="checkout of https://github.com/ros/rosdistro")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    commit, date = subprocess.run(
        ["git", "-C", str(args.rosdistro), "log", "-1", "--format=%H %cI"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    keys = resolve(package_keys(ROOT / "package.xml"), args.rosdistro)
    header = (
        "# package.xml's dependency keys and where rosdep resolves each one, checked against\n"
        f"# https://github.com/ros/rosdistro commit {commit} ({date}): rosdep/base.yaml,\n"
        f"# rosdep/python.yaml and {', '.join(d + '/distribution.yaml' for d in DISTROS)}.\n"
        "# Written by tools/rosdep_keys.py; only the keys this package uses.\n"
    )
    body = {"rosdistro_commit": commit, "rosdistro_date": date, "distros": list(DISTROS), "keys": keys}
    args.out.write_text(
        header + yaml.safe_dump(body, sort_keys=False, default_flow_style=None), encoding="utf-8"
    )
    bad = sorted(k for k, v in keys.items() if v.get("unresolved"))
    partial = sorted(
        k for k, v in keys.items() if "ros_package" in v and len(v["ros_package"]) < len(DISTROS)
    )
    print(f"wrote {args.out}: {len(keys)} keys")
    for key in partial:
        print(f"  {key}: released only in {', '.join(keys[key]['ros_package'])}")
    if bad:
        print(f"unresolved (rosdep install would fail): {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
