"""Work spread over threads (`core.threads`) and native stderr captured by
blocks open at once on several threads (`--verify --jobs`)."""

import os
import threading

import pytest

from irshard.backend.devices import quiet_native_stderr
from irshard.core import threads
from irshard.core.errors import UsageError


def test_each_runs_items_at_once_and_hands_back_results_in_order():
    # Two items that each wait for the other: only done at once.
    meet = threading.Barrier(2, timeout=10)

    def work(n):
        meet.wait()
        if n == "bad":
            raise RuntimeError("refused")
        return n * 2

    done = threads.each(work, {"b": 2, "bad": "bad"}, jobs=2)
    assert list(done) == ["b", "bad"]
    assert done["b"] == (4, None)
    assert isinstance(done["bad"][1], RuntimeError) and done["bad"][0] is None


def test_one_job_runs_on_the_calling_thread_and_stops_at_an_interruption():
    seen = []

    def work(n):
        seen.append(threading.current_thread())
        if n == 1:
            raise KeyboardInterrupt
        return n

    with pytest.raises(KeyboardInterrupt):
        threads.each(work, {0: 0, 1: 1, 2: 2}, jobs=1)
    assert seen == [threading.current_thread()] * 2     # item 2 never ran


def test_more_jobs_than_items_start_one_thread_per_item():
    names = threads.each(lambda _: threading.current_thread().name,
                         {k: k for k in range(3)}, jobs=8)
    assert len({name for name, _ in names.values()}) <= 3
    assert all(error is None for _, error in names.values())


@pytest.mark.parametrize("given, expected", [(3, 3), (1, 1)])
def test_job_count(given, expected):
    assert threads.job_count(given) == expected


def test_job_count_auto_is_the_cores_at_most_four():
    assert threads.job_count("auto") == max(1, min(4, os.cpu_count() or 1))
    assert threads.job_count(None) == threads.job_count("auto")


@pytest.mark.parametrize("wrong", [0, -2, 1.5, "two", True])
def test_job_count_refuses_what_is_not_a_count(wrong):
    with pytest.raises(UsageError, match="jobs: expected a positive whole number"):
        threads.job_count(wrong)


def test_native_stderr_blocks_open_at_once_share_one_redirection():
    real = os.fstat(2)
    inside = threading.Event()
    second_done = threading.Event()
    texts = {}

    def second():
        inside.wait(10)
        with quiet_native_stderr() as block:
            os.write(2, b"second\n")
        texts["second"] = block.text
        second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    with quiet_native_stderr() as block:
        os.write(2, b"first\n")
        inside.set()
        assert second_done.wait(10)
        os.write(2, b"first again\n")
    thread.join()
    # Each block has what was written while it was open.
    assert block.text == "first\nsecond\nfirst again\n"
    assert texts["second"] == "second\n"
    # The real stderr is back once the last block closes.
    now = os.fstat(2)
    assert (now.st_dev, now.st_ino) == (real.st_dev, real.st_ino)
