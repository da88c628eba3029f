"""The process-wide slots (gptviz.run.slots): never more holders than the capacity, first come first served,
each waiter told its place, and a holder or waiter that fails or gives up frees its place for the others."""
import threading
import time

import pytest

from gptviz.run.slots import Slots


def _wait_until(cond, timeout=5.0):
    end = time.time() + timeout
    while not cond():
        assert time.time() < end, "timed out"
        time.sleep(0.005)


def test_two_slots_four_runs_first_come_first_served_with_their_places():
    slots = Slots(2, "training")
    lock = threading.Lock()
    holding, most, order, places = [0], [0], [], {i: [] for i in range(4)}
    release = {i: threading.Event() for i in range(4)}

    def run(i):
        with slots.hold(on_wait=lambda ahead: places[i].append(ahead), poll=0.01):
            with lock:
                holding[0] += 1
                most[0] = max(most[0], holding[0])
                order.append(i)
            release[i].wait(5)
            with lock:
                holding[0] -= 1

    threads = []
    for i in range(4):  # one after the other, so the order they came in is known
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
        _wait_until(lambda n=i + 1: sum(slots.state()) == n)
    assert slots.state() == (2, 2)
    _wait_until(lambda: places[2] and places[3])
    assert places[2][-1] == 0 and places[3][-1] == 1  # run 2 is next; one run waits ahead of run 3
    assert places[0] == places[1] == []  # the first two never waited
    release[1].set()  # a slot frees: the first waiter (2) takes it, not 3
    _wait_until(lambda: len(order) == 3)
    assert order == [0, 1, 2]
    _wait_until(lambda: places[3][-1] == 0)  # run 3 moved up: next now
    for e in release.values():
        e.set()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3] and most[0] == 2 and slots.state() == (0, 0)


def test_a_holder_that_raises_frees_its_slot_for_the_next():
    """The issue's fault test at its root: one student's run raising does not keep the others waiting."""
    slots = Slots(1, "training")
    with pytest.raises(RuntimeError):
        with slots.hold():
            raise RuntimeError("a student's run failed")
    assert slots.state() == (0, 0)
    done = []

    def next_run():
        with slots.hold():
            done.append(1)

    t = threading.Thread(target=next_run)
    t.start()
    t.join(2)
    assert done == [1] and slots.state() == (0, 0)


def test_a_waiter_that_gives_up_leaves_the_queue_and_those_behind_move_up():
    slots = Slots(1, "big load")
    gate, seen = threading.Event(), {"c": []}

    class Gone(BaseException):  # as Streamlit's StopException: not an Exception
        pass

    def holder():
        with slots.hold():
            gate.wait(5)

    def quitter(ahead):
        raise Gone

    t = threading.Thread(target=holder)
    t.start()
    _wait_until(lambda: slots.state() == (1, 0))
    waiter_b = threading.Thread(target=lambda: _hold_and_record(slots, seen, "b"))
    waiter_b.start()
    _wait_until(lambda: slots.state() == (1, 1))
    with pytest.raises(Gone):  # a waiter whose page was left: its on_wait raises, and it leaves the queue
        with slots.hold(on_wait=quitter):
            pass
    assert slots.state() == (1, 1)
    waiter_c = threading.Thread(target=lambda: _hold_and_record(slots, seen, "c"))
    waiter_c.start()
    _wait_until(lambda: slots.state() == (1, 2) and seen["c"])
    assert seen["c"][-1] == 1  # b is ahead of c: the quitter no longer counts
    gate.set()
    for th in (t, waiter_b, waiter_c):
        th.join(5)
    assert slots.state() == (0, 0)


def _hold_and_record(slots, seen, name):
    seen.setdefault(name, [])
    with slots.hold(on_wait=lambda ahead: seen[name].append(ahead), poll=0.01):
        time.sleep(0.02)


def test_a_capacity_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0, "training")
