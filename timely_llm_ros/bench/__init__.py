"""Benchmarks: the bench CLI (policies × workloads → tables, JSON, figures) and
:mod:`~timely_llm_ros.bench.sched_overhead` (cost of one scheduling decision). Benchmarks measure;
they are not tests and assert nothing about time."""
