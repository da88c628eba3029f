"""The process-wide slots (gptviz.run.slots), the details test_slots.py leaves open: the number of trainings read
from GPTVIZ_MAX_TRAININGS, the capacity's checks and message, what ``hold`` yields, how often a waiter is told its
place, and that a freed slot wakes a waiter at once rather than at its next poll.

The oracle is the documented behaviour, spelt out in each test: the default of 2 runs, at least 1, a value that is
not a whole number ignored; ``on_wait`` called at once and then every ``poll`` seconds, and only while waiting."""
import threading
import time

import pytest

from gptviz.run import slots as slots_module
from gptviz.run.slots import DEFAULT_TRAININGS, Slots


@pytest.mark.parametrize("raw, expected", [
    (None, 2), ("", 2), ("   ", 2), ("3", 3), (" 4 ", 4), ("1", 1), ("0", 1), ("-5", 1), ("two", 2), ("2.5", 2)])
def test_the_number_of_trainings_at_once_comes_from_the_environment(monkeypatch, raw, expected):
    """Unset, blank or not a whole number: the default, 2; a whole number: itself, but never below 1."""
    if raw is None:
        monkeypatch.delenv("GPTVIZ_MAX_TRAININGS", raising=False)
    else:
        monkeypatch.setenv("GPTVIZ_MAX_TRAININGS", raw)
    got = slots_module._trainings_from_env()
    assert got == expected and type(got) is int
    assert DEFAULT_TRAININGS == 2


def test_a_capacity_of_one_is_allowed_and_zero_or_less_refused_with_the_documented_message():
    one = Slots(1, "big model load")
    assert (one.capacity, one.name, one.state()) == (1, "big model load", (0, 0))
    two = Slots(2.0, "training")  # a float from a setting: kept as a whole number
    assert two.capacity == 2 and type(two.capacity) is int
    for bad in (0, -1):
        with pytest.raises(ValueError) as e:
            Slots(bad, "training")
        assert str(e.value) == f"training: a capacity of {bad} would let nothing run; it must be at least 1"


def test_hold_yields_whether_it_had_to_wait_and_frees_the_slot_after():
    """A free slot: taken at once, no on_wait call, yields False. A full one: on_wait(0) at once, yields True."""
    slots = Slots(1, "training")
    calls = []
    with slots.hold(on_wait=calls.append) as waited:
        assert waited is False and calls == [] and slots.state() == (1, 0)
    assert slots.state() == (0, 0)
    got, release, holding = {}, threading.Event(), threading.Event()

    def holder():
        with slots.hold():
            holding.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)

    def waiter():
        with slots.hold(on_wait=calls.append, poll=0.01) as w:
            got["waited"] = w
            got["state"] = slots.state()

    u = threading.Thread(target=waiter)
    u.start()
    end = time.time() + 5
    while not calls and time.time() < end:
        time.sleep(0.005)
    assert calls[0] == 0  # told at once: nobody ahead
    release.set()
    t.join(5)
    u.join(5)
    assert got == {"waited": True, "state": (1, 0)} and slots.state() == (0, 0)


def test_a_waiter_is_told_its_place_every_poll_seconds_and_not_in_a_busy_loop():
    """Held for 0.45 s, a waiter polling every 0.1 s is told its place at once and about four times more: between
    3 and 7 calls in all (never hundreds, which would be a loop that does not wait)."""
    slots = Slots(1, "training")
    calls, holding = [], threading.Event()

    def holder():
        with slots.hold():
            holding.set()
            time.sleep(0.45)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    with slots.hold(on_wait=calls.append, poll=0.1) as waited:
        assert waited
    t.join(5)
    assert 3 <= len(calls) <= 7 and set(calls) == {0}


def test_the_default_poll_is_half_a_second():
    """Held for 0.75 s, a waiter with the default poll is told its place at once and again at 0.5 s: twice."""
    slots = Slots(1, "training")
    calls, holding = [], threading.Event()

    def holder():
        with slots.hold():
            holding.set()
            time.sleep(0.75)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    with slots.hold(on_wait=calls.append):
        pass
    t.join(5)
    assert calls == [0, 0]


def test_a_freed_slot_wakes_the_waiter_at_once_not_at_its_next_poll():
    """The waiter polls every 30 s; the holder leaves after 0.1 s: the waiter must get in well within a second, so
    it was woken by the release, not by its poll."""
    slots = Slots(1, "training")
    holding = threading.Event()

    def holder():
        with slots.hold():
            holding.set()
            time.sleep(0.1)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(5)
    start = time.time()
    with slots.hold(poll=30) as waited:
        took = time.time() - start
    t.join(5)
    assert waited and took < 1.5


def test_two_free_slots_take_two_waiters_in_at_once():
    """Two slots both held, two waiters polling every 30 s: when both holders leave, both waiters get in within a
    second (the first one in wakes the next in line, who may use the other free slot)."""
    slots = Slots(2, "training")
    go, held = threading.Event(), threading.Barrier(3)

    def holder():
        with slots.hold():
            held.wait(5)
            go.wait(5)

    hs = [threading.Thread(target=holder) for _ in range(2)]
    for h in hs:
        h.start()
    held.wait(5)
    inside, lock = [], threading.Lock()

    def waiter():
        with slots.hold(poll=30):
            with lock:
                inside.append(time.time())

    ws = [threading.Thread(target=waiter) for _ in range(2)]
    for w in ws:
        w.start()
    end = time.time() + 5
    while slots.state() != (2, 2) and time.time() < end:
        time.sleep(0.005)
    assert slots.state() == (2, 2)
    start = time.time()
    go.set()
    for th in hs + ws:
        th.join(5)
    assert len(inside) == 2 and max(inside) - start < 1.5 and slots.state() == (0, 0)
