"""The job pool behind the command-line test modules (cli_jobs.py): the declared jobs start at once, any other
only when a test waits for it, and each job runs once."""

from __future__ import annotations

import threading

import pytest
from cli_jobs import JobPool


def test_declared_jobs_start_at_once_and_others_on_demand():
    ran, lock = [], threading.Lock()

    def run(name):
        with lock:
            ran.append(name)
        return name.upper()

    pool = JobPool(run, ["a", "b", "c"], {"b"})
    assert pool.started == {"b"}
    assert pool.result("b") == "B" and pool.lazy("c").result() == "C" and pool.result("c") == "C"
    assert pool.started == {"b", "c"}
    pool.shutdown()
    assert sorted(ran) == ["b", "c"]  # "a" was never asked for; "c" ran once


def test_unknown_job_names_are_refused():
    with pytest.raises(AssertionError, match="do not exist"):
        JobPool(str, ["a"], {"x"})
    pool = JobPool(str, ["a"], set())
    with pytest.raises(AssertionError, match="no job named"):
        pool.result("x")
    pool.shutdown()
