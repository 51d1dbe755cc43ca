"""A secure-fleet path: SROS2 enclaves and the access-control policy of a fleet (no ROS import).

What the planner can protect by itself (README, "Reliability and security"): feedback must follow the
robot's own sequence and echo the segment's nonce (:mod:`timely_llm_ros.core.feedback`). What only
DDS-Security can protect: who may join the domain, read a topic or publish on it. This module gives a
fleet that DDS-Security:

* one **enclave** per node (``--ros-args --enclave /timely_llm_ros/planner``,
  ``/timely_llm_ros/robots/<agent>``, …; under a fleet namespace ``/<ns>/timely_llm_ros/…``), wired by
  ``timely-llm fleet`` and ``fleet.launch.py`` when the fleet file's ``security`` section is enabled,
  together with ``ROS_SECURITY_KEYSTORE``, ``ROS_SECURITY_ENABLE=true`` and ``ROS_SECURITY_STRATEGY``;
* the **policy** (SROS2 policy format 0.2.0, deny by default): only the planner may publish segments
  (``/<agent>/skill_segments``) and statuses; each robot may read only its own segment topic and
  publish feedback and heartbeats, and may not read ``/segment_feedback`` — so no robot learns
  another robot's segment nonces, and feedback with another robot's id is refused by the planner's
  nonce check; task senders (workload, clients) may publish ``/tasks`` and read statuses;
* ``timely-llm security init``: writes the policy and creates the keystore and every enclave's
  signed permissions from it — with ``ros2 security generate_artifacts`` (sros2) where installed,
  else with ``openssl`` (:mod:`timely_llm_ros.security_keystore`).

The ROS 2 wheels on PyPI carry a Fast DDS built without security (rcl finds the enclave, then node
creation fails: "This Fast DDS version doesn't have the security libraries"; the node says so in one
line, :mod:`timely_llm_ros.ros.secure_dds`): a secure fleet needs ``tools/build_secure_fastdds.py``'s
build (``TIMELY_SECURE_FASTDDS``) or a ROS 2 distribution.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

ROOT = "timely_llm_ros"  # first enclave path element
STRATEGIES = ("Enforce", "Permissive")
# every ROS 2 node: logging, parameter events and its own parameter services (SROS2's common profile)
_NODE_TOPICS_PUB = ("/rosout", "/parameter_events")
_NODE_TOPICS_SUB = ("/parameter_events",)
_PARAM_SERVICES = (
    "~/describe_parameters",
    "~/get_parameter_types",
    "~/get_parameters",
    "~/list_parameters",
    "~/set_parameters",
    "~/set_parameters_atomically",
    "~/get_type_description",
)
_LIFECYCLE_SERVICES = (
    "~/change_state",
    "~/get_state",
    "~/get_available_states",
    "~/get_available_transitions",
    "~/get_transition_graph",
)


class SecurityConfigError(ValueError):
    """A fleet file's ``security`` section that cannot be used (the message names file and field)."""


def enclave(role: str, fleet_ns: str = "/", agent: str = "") -> str:
    """Enclave path of a fleet node: ``[/<ns>]/timely_llm_ros/<role>`` or ``…/robots/<agent>``."""
    parts = [p for p in fleet_ns.strip("/").split("/") if p] + [ROOT]
    parts += ["robots", agent] if role == "robot" else [role]
    return "/" + "/".join(parts)


def security_section(cfg: dict[str, Any], src: str) -> dict[str, Any] | None:
    """The fleet file's ``security`` section, checked (None when absent or disabled; raises
    :class:`SecurityConfigError`)."""
    sec = cfg.get("security")
    if sec is None:
        return None
    if not isinstance(sec, dict):
        raise SecurityConfigError(f"{src}: security: expected a mapping (enabled, keystore, strategy)")
    if not sec.get("enabled", True):
        return None
    keystore = sec.get("keystore")
    if not isinstance(keystore, str) or not keystore.strip():
        raise SecurityConfigError(
            f"{src}: security.keystore is required (create one: timely-llm security init)"
        )
    strategy = sec.get("strategy", "Enforce")
    if strategy not in STRATEGIES:
        raise SecurityConfigError(
            f"{src}: security.strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    path = Path(keystore).expanduser()
    if not path.is_absolute():
        path = Path(cfg.get("_dir", ".")) / path
    return {"keystore": str(path), "strategy": strategy}


def security_env(sec: dict[str, Any]) -> dict[str, str]:
    """The environment every node of a secure fleet gets."""
    return {
        "ROS_SECURITY_KEYSTORE": sec["keystore"],
        "ROS_SECURITY_ENABLE": "true",
        "ROS_SECURITY_STRATEGY": sec["strategy"],
    }


# ------------------------------------------------------------------------------------------ policy
def _rules(kind: str, perm: str, names: list[str]) -> str:
    names = sorted(set(names))
    if not names:
        return ""
    items = "".join(f"\n            <{kind[:-1]}>{escape(n)}</{kind[:-1]}>" for n in names)
    return f'\n          <{kind} {perm}="ALLOW">{items}\n          </{kind}>'


def _profile(ns: str, node: str, **rules: list[str]) -> str:
    """One ``<profile>``; ``rules`` keys are ``<kind>_<permission>`` (e.g. ``topics_publish``)."""
    body = "".join(_rules(key.split("_")[0], key.split("_")[1], names) for key, names in rules.items())
    return f'\n      <profiles>\n        <profile ns="{escape(ns)}" node="{escape(node)}">{body}\n        </profile>\n      </profiles>'


def policy_xml(nodes: list[Any], fleet_ns: str = "/") -> str:
    """The SROS2 policy of a fleet's node graph (:func:`timely_llm_ros.fleet.fleet_nodes`)."""
    from timely_llm_ros.interfaces import topics as t

    def fleet(name: str) -> str:
        return t.join(fleet_ns, name)

    agents = [n.params.get("agent_id") or n.namespace.rsplit("/", 1)[-1] for n in nodes if n.role == "robot"]
    segs = [t.join(t.join(fleet_ns, a), t.SKILL_SEGMENTS) for a in agents]
    tasks, status, trace = fleet(t.TASKS), fleet(t.TASK_STATUS), fleet(t.TRACE_EVENTS)
    feedback, beat = fleet(t.SEGMENT_FEEDBACK), fleet(t.ROBOT_HEARTBEAT)
    common = {"services_reply": list(_PARAM_SERVICES)}
    pub, sub = list(_NODE_TOPICS_PUB), list(_NODE_TOPICS_SUB)
    out = []
    for n in nodes:
        ns = "/" + n.namespace if n.namespace else "/"
        if n.role == "planner":
            lifecycle = f"{ns.rstrip('/')}/{n.name}/transition_event"  # a LifecycleNode publishes it
            rules = {
                "topics_publish": pub + segs + [status, trace, tasks, lifecycle],
                "topics_subscribe": sub + [tasks, feedback, beat],
                "services_reply": list(_PARAM_SERVICES) + list(_LIFECYCLE_SERVICES) + [fleet("cancel_task")],
                "actions_execute": [fleet("plan_task")],
            }
        elif n.role == "robot":
            agent = n.params.get("agent_id") or n.namespace.rsplit("/", 1)[-1]
            rules = {
                "topics_publish": pub + [feedback, beat],
                "topics_subscribe": sub + [tasks, status, t.join(t.join(fleet_ns, agent), t.SKILL_SEGMENTS)],
                **common,
            }
        elif n.role == "recorder":
            rules = {
                "topics_publish": pub + ["/diagnostics"],
                "topics_subscribe": sub + [tasks, feedback, status, trace] + segs,
                **common,
            }
        elif n.role == "timemodel":
            rules = {
                "topics_publish": pub,
                "topics_subscribe": sub + [tasks, feedback] + segs,
                "services_reply": list(_PARAM_SERVICES) + [fleet(t.ESTIMATE_EXEC_TIME)],
            }
        else:  # workload: a task sender
            rules = {"topics_publish": pub + [tasks], "topics_subscribe": sub + [status], **common}
        agent = n.params.get("agent_id", "") if n.role == "robot" else ""
        path = enclave(n.role, fleet_ns, agent or n.namespace.rsplit("/", 1)[-1])
        out.append(f'\n    <enclave path="{escape(path)}">{_profile(ns, n.name, **rules)}\n    </enclave>')
    planners = [
        ("/" + n.namespace if n.namespace else "").rstrip("/") + "/" + n.name
        for n in nodes
        if n.role == "planner"
    ]
    client = {  # any other task sender (an operator's tool, a robot's own planner client), and the
        # fleet's lifecycle client (configure/activate the planner); its node name is the tool's own
        "topics_publish": pub + [tasks],
        "topics_subscribe": sub + [status],
        "services_request": [fleet("cancel_task")]
        + [f"{p}/{s}" for p in planners for s in ("change_state", "get_state")],
        "services_reply": ["/*/get_type_description"],  # every rclpy node serves it, whatever its name
        "actions_call": [fleet("plan_task")],
    }
    out.append(
        f'\n    <enclave path="{escape(enclave("client", fleet_ns))}">{_profile("/", "client", **client)}\n    </enclave>'
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<!-- SROS2 access-control policy of a timely_llm_ros fleet (timely-llm security init).\n"
        "     Deny by default: only what is listed is allowed. -->\n"
        f'<policy version="0.2.0">\n  <enclaves>{"".join(out)}\n  </enclaves>\n</policy>\n'
    )
