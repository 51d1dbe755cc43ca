"""Pictures of a run: the timeline (PNG/SVG via matplotlib, self-contained HTML), the metrics report,
and the live Qt timeline widget behind the rqt plugin and ``timely-llm rqt-timeline``."""
