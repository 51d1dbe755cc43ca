"""The planner service: a fleet planner's task life without ROS.

Between the core (one :class:`~timely_llm_ros.core.planner.PlannerCore` and its engine) and the ROS
planner node sits what a long-running planner needs around the core: a front door that takes tasks
from many threads, a planner thread that owns core and engine, typed hand-off queues between them,
segment watchdogs, a crash-recovery journal and the book of open tasks. None of it needs a message
class or a ROS entity, so it lives here and is unit-tested on a fake clock; the node
(:mod:`timely_llm_ros.nodes.planner`) only declares parameters, creates ROS entities, converts
messages and drives the lifecycle.

* :mod:`.planner_service` — :class:`~.planner_service.PlannerService` (the planner thread's task life,
  configure / start / shutdown) and :class:`~.planner_service.Ports` (what the host supplies);
* :mod:`.front_desk` — :class:`~.front_desk.FrontDesk`: intake checks, ids, tasks waiting for their
  robot, cancel requests, recovered tasks (the host's callback threads);
* :mod:`.handoff` — typed items between the two threads; :mod:`.open_tasks` — the front door's book
  of open tasks; :mod:`.liveness` — segment watchdogs and the feedback clock; :mod:`.journal` — the
  crash-recovery journal.
"""
