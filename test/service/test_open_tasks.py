"""The front door's book of open tasks (service/open_tasks.py)."""

from __future__ import annotations

import threading

from timely_llm_ros.service.open_tasks import OpenTasks


def test_counts_per_agent_and_forgets_idle_agents():
    book = OpenTasks()
    book.opened("t1", "d1")
    book.opened("t2", "d1")
    book.opened("t3", "a1")
    assert len(book) == 3 and "t2" in book and book.agent_of("t3") == "a1"
    assert book.busy_agents() == {"d1", "a1"}
    book.closed("t1")
    book.closed("t1")  # closed once: a second close changes nothing
    assert book.busy_agents() == {"d1", "a1"}
    book.closed("t2")
    assert book.busy_agents() == {"a1"} and book.agent_of("t2") is None
    assert book.take_all() == {"t3": "a1"}
    assert len(book) == 0 and book.busy_agents() == set() and book.ids() == []


def test_two_threads_keep_the_counts_consistent():
    book = OpenTasks()

    def churn(prefix: str) -> None:
        for i in range(2000):
            book.opened(f"{prefix}{i}", "d1")
            book.closed(f"{prefix}{i}")

    threads = [threading.Thread(target=churn, args=(p,)) for p in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(book) == 0 and book.busy_agents() == set()
