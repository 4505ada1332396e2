"""Named subprocess jobs shared by the tests of one module, run in a small thread pool.

A module that runs the command line in subprocesses builds every job's arguments once (a module-scoped fixture)
and lets its tests wait for the jobs they check. ``JobPool`` starts, up front and in parallel, only the jobs
that the selected tests declare with ``@pytest.mark.cli_jobs(name, ...)`` (so ``-m "not slow"`` does not pay
for the runs of the deselected slow tests), and starts any other job when a test first asks for it: a test
without the marker still gets its run, only later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest


def declared_jobs(request: pytest.FixtureRequest) -> set[str]:
    """Job names declared by the selected tests (``session.items``, after -m/-k) of the requesting module."""
    names: set[str] = set()
    for item in request.session.items:
        if getattr(item, "module", None) is request.module:
            for mark in item.iter_markers("cli_jobs"):
                names.update(mark.args)
    return names


class JobPool:
    def __init__(self, run: Callable[[str], object], names: Iterable[str], start: Iterable[str], workers: int = 3):
        """``run(name)`` runs one job; ``names`` are all the jobs, ``start`` those to start now (in order);
        ``workers=0``: each job runs in the calling thread when a test first asks for it (in-process runs)."""
        self._run, self._names = run, list(names)
        self._pool = ThreadPoolExecutor(max_workers=workers) if workers else None
        start = start if workers else ()
        self._futures: dict[str, Future] = {}
        wanted = set(start)
        unknown = wanted - set(self._names)
        assert not unknown, f"cli_jobs marks name jobs that do not exist: {sorted(unknown)}"
        for name in self._names:
            if name in wanted:
                self.future(name)

    def future(self, name: str) -> Future:
        if name not in self._futures:
            assert name in self._names, f"no job named {name!r}"
            if self._pool is None:
                done: Future = Future()
                done.set_result(self._run(name))
                self._futures[name] = done
            else:
                self._futures[name] = self._pool.submit(self._run, name)
        return self._futures[name]

    def result(self, name: str):
        return self.future(name).result()

    def lazy(self, name: str) -> LazyJob:
        """A handle whose ``result()`` waits for the job, starting it first if it has not been started."""
        assert name in self._names, f"no job named {name!r}"
        return LazyJob(self, name)

    @property
    def started(self) -> set[str]:
        return set(self._futures)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class LazyJob:
    def __init__(self, pool: JobPool, name: str):
        self.pool, self.name = pool, name

    def result(self):
        return self.pool.result(self.name)
