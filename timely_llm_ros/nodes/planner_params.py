"""Parameters of the planner node, and ``engine_options`` in every form users write them.

``engine_options`` is a mapping (e.g. ``{model_path: /models/m.gguf}``), which ROS parameters cannot
hold. Users write it in three ways, all accepted:

* ``-p engine_options:="{model_path: /m.gguf}"`` — the README form. rcl parses a ``-p`` value as YAML,
  so the (shell-unquoted) ``{model_path: /m.gguf}`` is a mapping and rcl refused the whole command line
  with a YAML traceback. :func:`quote_mapping_args` rewrites such an argument into a YAML string
  before rclpy sees it;
* ``engine_options: {model_path: /m.gguf}`` in a parameter file or a fleet YAML — rcl flattens a
  nested mapping into parameters ``engine_options.model_path``, which nobody declared, so the options
  were silently ignored (and the default 135M model ran). :func:`nested_options` collects them;
* ``engine_options: "{model_path: /m.gguf}"`` (a YAML/JSON string) — as before.

Values given both ways are merged; a nested key wins over the same key in the string.

The nested form is a set of real ROS parameters of the planner: ``ros2 param list /planner`` shows
``engine_options.model_path``, and ``ros2 param set /planner engine_options.model_path /m.gguf`` adds
or changes one (``ros2 param delete`` removes it). Like ``engine``, ``policy``, ``profile`` and the
string form they are read by the configure transition, so they can be changed only while the planner
is unconfigured (``configure_time``): cleanup, set, configure, activate re-points a running process at
another engine or model; a change while it is configured is refused with that recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml

from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.options.replay import MODEL, PLAN_SOURCES
from timely_llm_ros.core.sched.policies import parse_policy
from timely_llm_ros.engines.registry import ENGINES
from timely_llm_ros.nodes.common import Param, nonempty
from timely_llm_ros.nodes.sim_support import CATALOG

MAPPING_PARAMS = ("engine_options", "planner_options")
RESTART_MODES = ("fail", "resume")

# Options the planner gives an engine unless engine_options says otherwise. llama.cpp: feed prompts in
# chunks of 16 tokens, or 64 at once while a prompt has 64 left, so that an urgent prompt takes over
# from a normal one at a chunk boundary (LlamaCppEngine.set_priority). Measured on the embedded model
# (2-core dev machine, 1 thread, 1.2k-token skill prompt cached): a step feeding n prompt tokens
# costs ~12 ms/token for n < 64 (16 tokens: 0.2 s) and ~7 ms/token from n = 64 (0.47 s), so these
# chunks make no prompt slower than feeding it whole, and an urgent request waits at most one chunk.
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {"llamacpp": {"prefill_chunk": 16, "prefill_fast_batch": 64}}


def parse_mapping(text: str) -> dict[str, Any]:
    """A YAML/JSON mapping written as a string ('' = empty); ValueError with the reason."""
    if not text.strip():
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not a YAML/JSON mapping: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"must be a YAML/JSON mapping such as '{{model_path: /path/model.gguf}}', got {text!r}"
        )
    return data


def _check_by(parse: Callable[[Any], Any]) -> Callable[[Any], str | None]:
    """A parameter check from a parser: its ValueError (UnknownPolicy included) is the problem."""

    def check(value: Any) -> str | None:
        try:
            parse(value)
        except ValueError as exc:
            return str(exc)
        return None

    return check


def quote_mapping_args(argv: Sequence[str]) -> list[str]:
    """``-p engine_options:={a: 1}`` → ``-p engine_options:='{a: 1}'`` (a YAML string for rcl)."""
    out = list(argv)
    for i in range(len(out) - 1):
        if out[i] not in ("-p", "--param"):
            continue
        name, sep, value = out[i + 1].partition(":=")
        if sep and name in MAPPING_PARAMS and value.strip().startswith("{"):
            out[i + 1] = f"{name}:='" + value.replace("'", "''") + "'"
    return out


def configure_time_param(name: str) -> bool:
    """Whether the parameter ``name`` is read only by configure (see the module docstring)."""
    return name in CONFIGURE_TIME or any(name.startswith(m + ".") for m in MAPPING_PARAMS)


def nested_options(overrides: Mapping[str, Any], name: str = "engine_options") -> dict[str, Any]:
    """Parameters ``<name>.a.b`` (a mapping in a parameter file, flattened by rcl) as ``{a: {b: ...}}``."""
    out: dict[str, Any] = {}
    prefix = name + "."
    for key, param in overrides.items():
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix) :].split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        value = getattr(param, "value", param)
        node[parts[-1]] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def engine_options(engine: str, text: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The options passed to the engine: the planner's defaults, the string form, the nested form."""
    return {**ENGINE_DEFAULTS.get(engine, {}), **parse_mapping(text), **nested_options(overrides)}


def planner_options(text: str, overrides: Mapping[str, Any]) -> PlannerOptions:
    """The ``planner_options`` parameter (string or nested form) as validated :class:`PlannerOptions`."""
    return PlannerOptions.from_mapping(
        {**parse_mapping(text), **nested_options(overrides, "planner_options")}
    )


def parse_agent_types(entries: list[str]) -> dict[str, str]:
    """``["drone_1:drone", "arm_1:arm"]`` → ``{"drone_1": "drone", ...}``; ValueError with the entry."""
    out: dict[str, str] = {}
    for entry in entries:
        agent, sep, rtype = entry.partition(":")
        if not sep or not agent.strip() or not rtype.strip():
            raise ValueError(f"entry {entry!r} is not 'agent:robot_type'")
        out[agent.strip()] = rtype.strip()
    return out


def _journal_check(value: str) -> str | None:
    return None if value == value.strip() else "must not start or end with spaces"


PARAMS = (
    Param(
        "engine",
        "sim",
        "LLM engine: " + ", ".join(f"{n} ({e.summary})" for n, e in ENGINES.items()),
        choices=tuple(ENGINES),  # the registry's names (the one list), in its order
        configure_time=True,
    ),
    Param(
        "engine_options",
        "",
        "options for the engine (sim: kv_policy, eviction, reload, chunked_prefill; "
        "llamacpp/vllm/openai: their constructor options), as a YAML/JSON mapping string "
        '(-p engine_options:="{model_path: /m.gguf}") or as nested parameters engine_options.<key> '
        "(a mapping in a parameter file, or ros2 param set /planner engine_options.model_path ...; "
        "a nested key wins); passed to "
        "timely_llm_ros.engines.registry.create_engine over the planner's defaults (llamacpp "
        "{prefill_chunk: 16, prefill_fast_batch: 64}; null turns one off)",
        configure_time=True,
        check=_check_by(parse_mapping),
    ),
    Param(
        "planner_options",
        "",
        "options beyond the paper (README 'Beyond the paper'), a YAML/JSON mapping "
        'such as "{overrun: kill, urgency: llm}": urgency (off|lexical|llm: TUF of tasks sent without one), '
        "length_predictor, pessimism, overrun (continue|kill|skip-next), token_budget (whole|fixed|slack)",
        configure_time=True,
        check=_check_by(lambda text: PlannerOptions.from_mapping(parse_mapping(text))),
    ),
    Param(
        "profile",
        "llama3-8b-fp16-rtx4090",
        "engine profile (config/profiles) timing the sim engine",
        configure_time=True,
        check=nonempty,
    ),
    Param(
        "policy",
        "timely",
        "scheduling policy: timely, timely-paper, fcfs-seg, fcfs-requeue, edf-seg, vllm, "
        "vllm-stream, optionally @bN for a fixed max batch and @aK for at most K admissions per step",
        configure_time=True,
        check=_check_by(parse_policy),
    ),
    Param(
        "network_latency",
        0.008,
        "planner -> robot latency assumed by the scheduler (s)",
        low=0.0,
        high=1.0,
        read_only=True,
    ),
    Param(
        "sim_plans",
        [CATALOG],
        "sim engine and replay mode: where reference plans come from: 'catalog' (LRTrace tasks) "
        "and workload specs (preset, public sample or file)",
        configure_time=True,
    ),
    Param(
        "plan_source",
        MODEL,
        "model: the model writes its own plans (skill grammar); reference: replay mode, a real engine "
        "writes each task's reference plan (from sim_plans) exactly, as its structured-output "
        "constraint, so timing is comparable across engines and the simulator (also the "
        "planner_options key plan_source)",
        choices=PLAN_SOURCES,
        read_only=True,
    ),
    Param("require_robot", True, "reject tasks whose agent has no robot node on /<agent>/skill_segments"),
    Param(
        "robot_grace_period",
        2.0,
        "how long a task waits for its robot node to be discovered (s)",
        low=0.0,
        high=600.0,
    ),
    Param(
        "agent_types",
        [],
        "optional 'agent:robot_type' entries; a task whose robot_type differs is rejected",
        check=_check_by(parse_agent_types),
    ),
    Param(
        "agent_queue_depth",
        16,
        "open tasks per robot (one executes, the others wait in order); one more is rejected",
        low=1,
        high=100_000,
        read_only=True,
    ),
    Param(
        "lookahead",
        1,
        "queued tasks per robot that may generate ahead while its current task executes "
        "(their segments are held until it ends); 0 = queued tasks wait unscheduled",
        low=0,
        high=64,
        read_only=True,
    ),
    Param(
        "segment_timeout",
        0.0,
        "fixed time a robot has to start, and to finish, its current segment (s); "
        "0 = expected execution time x segment_timeout_factor + segment_timeout_margin",
        low=0.0,
        high=86400.0,
    ),
    Param(
        "segment_timeout_factor",
        3.0,
        "multiplier of the expected execution time in the segment timeout",
        low=1.0,
        high=1000.0,
    ),
    Param(
        "segment_timeout_margin",
        5.0,
        "added to the segment timeout (s): delivery, robot start-up",
        low=0.0,
        high=86400.0,
    ),
    Param(
        "heartbeat_timeout",
        5.0,
        "a started segment whose robot sends PROGRESS heartbeats stays alive "
        "while they come at least this often (s), however long it runs",
        low=0.1,
        high=3600.0,
    ),
    Param(
        "feedback_min_exec_fraction",
        0.5,
        "a DONE counts no earlier than this fraction of the segment's minimum execution time (the "
        "execution-time model's lower bound) after its STARTED; an earlier one is applied at that "
        "time (0 = no time check; robots simulated faster than real time: time_scale x 0.5)",
        low=0.0,
        high=10.0,
    ),
    Param(
        "robot_down_timeout",
        5.0,
        "a robot heard on robot_heartbeat and then silent for this long is down: all its open tasks "
        "FAIL at once and new ones are rejected until it beats again (s; 0 = off)",
        low=0.0,
        high=3600.0,
    ),
    Param(
        "segment_lifespan",
        30.0,
        "QoS lifespan of segments (s): one not delivered within it is "
        "discarded by DDS (the segment timeout then fails its task); 0 = unlimited",
        low=0.0,
        high=86400.0,
        read_only=True,
    ),
    Param(
        "default_max_tokens",
        256,
        "generation budget of tasks that send max_tokens = 0",
        low=1,
        high=1_000_000,
        read_only=True,
    ),
    Param(
        "feedback_clock_tolerance",
        5.0,
        "robot feedback stamps further than this from the planner's "
        "clock are replaced by the receipt time (s)",
        low=0.0,
        high=86400.0,
    ),
    Param(
        "warmup_skill_sets",
        [],
        "skill sets whose fixed prompt is prefilled at start-up, before /tasks "
        "is subscribed, so no task pays for it (useful with llamacpp/vllm)",
        configure_time=True,
    ),
    Param(
        "max_queued_tasks",
        100_000,
        "open tasks (all robots) beyond which a new task is rejected as overloaded",
        low=1,
        high=10_000_000,
    ),
    Param(
        "max_inbound",
        2000,
        "tasks received but not yet taken by the planner thread beyond which a new "
        "task is rejected as overloaded (the answer names the queue state)",
        low=1,
        high=1_000_000,
    ),
    Param(
        "finished_retention",
        2000,
        "finished tasks the planner remembers (late feedback, duplicate ids); "
        "older ones are forgotten so memory stays flat",
        low=1,
        high=10_000_000,
        read_only=True,
    ),
    Param(
        "publisher_idle_timeout",
        60.0,
        "a robot's segment publisher is removed after it had no open task for this long (s)",
        low=0.0,
        high=86400.0,
    ),
    Param(
        "warn_period",
        5.0,
        "repeated warnings of one kind (bad feedback, rejections) are logged at most "
        "once per this period, with a count (s)",
        low=0.0,
        high=3600.0,
    ),
    Param(
        "journal",
        "",
        "crash-recovery journal file; '' = $ROS_HOME/timely_llm_ros/<domain>_<node>.journal "
        "(ROS_HOME defaults to ~/.ros); 'off' = none",
        read_only=True,
        check=_journal_check,
    ),
    Param(
        "autostart",
        True,
        "configure and activate at start-up (a plain node); false: a managed "
        "lifecycle node that waits for the transitions configure (load the engine, warm up) and "
        "activate (accept tasks), as fleet.launch.py and timely-llm fleet drive them",
        read_only=True,
    ),
    Param(
        "on_deactivate",
        "finish",
        "open tasks when the planner is deactivated: 'finish' (they go on to "
        "their end; new tasks are rejected) or 'cancel' (each ends CANCELLED)",
        choices=("finish", "cancel"),
    ),
    Param(
        "on_restart",
        "fail",
        "tasks the journal shows open after a restart: 'fail' (FAILED \"planner "
        "restarted\") or 'resume' (re-plan the rest of the plan)",
        choices=RESTART_MODES,
        read_only=True,
    ),
)
CONFIGURE_TIME = frozenset(p.name for p in PARAMS if p.configure_time)
