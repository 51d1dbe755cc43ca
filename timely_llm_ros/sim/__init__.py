"""The discrete-event simulator: a workload run through :class:`~timely_llm_ros.core.planner.PlannerCore`
on a virtual-clock engine (simulated, or a replica set of them) with simulated robots.

Why a layer of its own, above ``engines``: the simulator *composes* core (the planner, the
simulated robots) with a concrete engine, so it cannot live in ``core`` (which depends on nothing
else in the package) and is not an engine itself. The bench, the viz tests and users' scripts
import :func:`~timely_llm_ros.sim.simulator.simulate` from here."""
