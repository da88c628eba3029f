"""The shared store's limits and failures (gptviz/live/redis_store.py), on a throwaway ``redis-server`` (the fixture of
test_live_store.py): what a teacher sees when Redis is down or the store is full, that a taken code is drawn again
at most 20 times, the keys the docstring promises to an operator (names, hash tag, time to live) and how a class
hash written by hand (an older version's, a half-written one) reads. Expected values are written out here (key
names from the module's docstring, messages, counts), never read back from the store's own helpers."""
import socket

import pytest
import redis
import test_live_store
from test_live_store import LESSON, ids

from gptviz.live import ClassStoreFull, ClassStoreUnavailable, open_store, redis_store
from gptviz.live.redis_store import RedisStore

redis_url = test_live_store.redis_url  # the throwaway redis-server fixture (one per module)
DOWN = "the class store (Redis) failed: ConnectionError"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_call_says_the_class_store_failed_when_redis_cannot_be_reached():
    s = open_store(f"redis://127.0.0.1:{_closed_port()}/0", idle_seconds=60)
    code, token, sid = "ABCDEF", "T" * 32, "s" * 32
    calls = {"create": lambda: s.create(LESSON), "get": lambda: s.get(code), "version": lambda: s.version(code),
             "is_teacher": lambda: s.is_teacher(code, token), "advance": lambda: s.advance(code, token, 1),
             "reveal": lambda: s.reveal(code, token), "answer": lambda: s.answer(code, sid, 0, 1),
             "answers": lambda: s.answers(code, 0), "my_answer": lambda: s.my_answer(code, sid, 0),
             "join": lambda: s.join(code, sid, "Ann"), "students": lambda: s.students(code),
             "nicknames": lambda: s.nicknames(code)}
    for what, call in calls.items():
        with pytest.raises(ClassStoreUnavailable) as e:
            call()
        assert str(e.value) == DOWN, what
        assert e.value.__cause__ is None and e.value.__suppress_context__, "no Redis internals in the message"


def test_a_taken_code_is_drawn_again_and_after_20_taken_codes_the_teacher_is_told(redis_url, monkeypatch):
    s = RedisStore(redis_url, prefix="draw", idle_seconds=60)
    taken, _ = s.create(LESSON)
    drawn = []

    def always_taken():
        drawn.append(taken)
        return taken
    monkeypatch.setattr(redis_store, "new_code", always_taken)
    with pytest.raises(ClassStoreFull, match="^no free class code was found in 20 tries$"):
        s.create(LESSON)
    assert len(drawn) == 20
    codes = iter([taken, taken, "GHJKLM"])
    monkeypatch.setattr(redis_store, "new_code", lambda: next(codes))
    code, token = s.create(LESSON, "es")
    assert code == "GHJKLM" and s.get(code).lang == "es" and s.is_teacher(code, token)
    assert s.get(taken).lang == "en", "the class that held the code is untouched"


def test_a_full_shared_store_tells_the_teacher_how_many_classes_it_holds(redis_url):
    s = RedisStore(redis_url, prefix="full", idle_seconds=60, max_classes=2)
    s.create(LESSON)
    s.create(LESSON)
    with pytest.raises(ClassStoreFull, match="^the class store already holds 2 classes$"):
        s.create(LESSON)


def test_the_keys_are_the_documented_ones_under_the_prefix_and_all_expire_after_idle_seconds(redis_url):
    """Oracle: the key layout in redis_store's docstring: ``<prefix>:class:{CODE}`` with ``:students``, ``:steps``,
    ``:ans:<step>``, and ``<prefix>:classes``; the default prefix is ``gptviz``; every key's TTL is idle_seconds."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(redis_url, idle_seconds=3000)
    assert s.prefix == "gptviz"
    code, token = s.create(LESSON, "pt-BR", "a=1")
    IDS = ids(s, code)
    assert s.join(code, IDS[0], "Ann") and s.answer(code, IDS[1], 0, 3)
    assert s.advance(code, token, 2) and s.answer(code, IDS[0], 2, 5)
    k = f"gptviz:class:{{{code}}}"
    assert set(r.keys("gptviz:*")) == {k, k + ":students", k + ":steps", k + ":ans:0", k + ":ans:2",
                                       "gptviz:classes"}
    assert all(2_900_000 < r.pttl(key) <= 3_000_000 for key in r.keys("gptviz:*")), {x: r.pttl(x) for x in r.keys("*")}
    assert r.hgetall(k + ":students") == {IDS[0]: "Ann", IDS[1]: ""}
    assert r.hgetall(k + ":ans:0") == {IDS[1]: "3"} and r.hgetall(k + ":ans:2") == {IDS[0]: "5"}
    assert r.smembers(k + ":steps") == {"0", "2"} and r.zrange("gptviz:classes", 0, -1) == [code]
    h = r.hgetall(k)
    assert (h["lesson_id"], h["lang"], h["step"], h["revealed"], h["version"], h["settings"]) == (
        LESSON, "pt-BR", "2", "0", "2", "a=1")
    assert len(h["token"]) == 64 and token not in h.values()
    assert len(h["secret"]) == 43 and h["idle"] == "3000000", "the class's own secret and idle time (ms)"
    r.delete(*r.keys("gptviz:*"))


def test_a_class_hash_written_without_settings_reads_as_no_settings_and_a_half_written_one_as_no_class(
        redis_url):
    """A class created by a version without shared settings (nor its own idle time) has no ``settings`` field: it
    reads as "", and its idle time is the store's (in whole milliseconds: 60 s, or 1 ms). A hash without
    ``version`` (never a whole class) reads as no class at all."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(redis_url, prefix="old", idle_seconds=60)
    r.hset("old:class:{KLMNPQ}", mapping={"lesson_id": LESSON, "lang": "es", "step": "3", "revealed": "1",
                                          "version": "7", "created": "1700000000.5", "touched": "1700000100.25"})
    st = s.get("KLMNPQ")
    assert (st.code, st.lesson_id, st.lang, st.step, st.revealed, st.version, st.created, st.touched, st.settings) == (
        "KLMNPQ", LESSON, "es", 3, True, 7, 1_700_000_000.5, 1_700_000_100.25, "")
    assert st.idle == 60.0 and RedisStore(redis_url, prefix="old", idle_seconds=0.001).get("KLMNPQ").idle == 0.001
    r.hset("old:class:{RSTUVW}", mapping={"touched": "1700000100.25", "lesson_id": LESSON})
    assert s.get("RSTUVW") is None and s.version("RSTUVW") is None
    r.delete("old:class:{KLMNPQ}", "old:class:{RSTUVW}")


def test_the_idle_time_is_passed_to_redis_in_milliseconds(redis_url):
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(redis_url, prefix="ms", idle_seconds=250.5)
    code, _ = s.create(LESSON)
    IDS = ids(s, code)
    assert 200_000 < r.pttl(f"ms:class:{{{code}}}") <= 250_500
    assert s.join(code, IDS[0])
    assert all(200_000 < r.pttl(k) <= 250_500 for k in r.keys("ms:*"))
    r.delete(*r.keys("ms:*"))


def test_a_class_told_to_end_within_a_millisecond_is_given_one_millisecond_in_redis(redis_url):
    """What Redis is told (its ``MONITOR`` stream, the commands the scripts ran): a store whose idle time is 1 ms
    sets the keys of a new class to expire in 1 ms, and a class shortened to 1 ms (``expire``) keeps 1 ms as its
    idle time and sets its keys to expire in 1 ms."""
    r = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5)
    k = "mon:class:{%s}"
    kept = RedisStore(redis_url, prefix="mon", idle_seconds=60)
    code, token = kept.create(LESSON)
    with r.monitor() as m:
        short, _ = RedisStore(redis_url, prefix="mon", idle_seconds=0.001).create(LESSON)
        assert kept.expire(code, token, 0.001)
        r.set("mon:done", "1")
        seen = []
        while "mon:done" not in (cmd := m.next_command()["command"]):
            seen.append(cmd.split())
    pexpire = [(c[1], c[2]) for c in seen if c[0] == "PEXPIRE"]
    for cls in (short, code):
        told = {ms for key, ms in pexpire if key.startswith(k % cls)}
        assert (k % cls, "1") in pexpire and told == {"1"}, (cls, seen)
    assert ("mon:classes", "1") in pexpire, "the index too, after the 1 ms store's create"
    assert ["HSET", k % code, "idle", "1"] in seen, seen
    r.delete(*r.keys("mon:*"))


def test_open_store_hands_the_limits_to_the_store_it_picks(monkeypatch):
    """The limits given to ``open_store`` reach the store, Redis or memory (the environment says otherwise here)."""
    monkeypatch.setenv("GPTVIZ_CLASS_IDLE_SECONDS", "99")
    monkeypatch.setenv("GPTVIZ_MAX_CLASSES", "98")
    monkeypatch.setenv("GPTVIZ_MAX_STUDENTS", "97")
    url = f"redis://127.0.0.1:{_closed_port()}/0"  # no connection is made until a call
    for store in (open_store(url, idle_seconds=5, max_classes=3, max_students=4),
                  open_store(f"  {url} ", idle_seconds=5, max_classes=3, max_students=4)):
        assert isinstance(store, RedisStore) and (store.idle_seconds, store.max_classes, store.max_students) == (
            5.0, 3, 4)
    store = open_store("", idle_seconds=5, max_classes=3, max_students=4)
    assert not isinstance(store, RedisStore) and (store.idle_seconds, store.max_classes, store.max_students) == (
        5.0, 3, 4)
    store = open_store(url)
    assert (store.idle_seconds, store.max_classes, store.max_students) == (99.0, 98, 97)


_prefixes = iter(range(10**6))


@pytest.fixture(params=["memory", "redis"])
def store(request):
    """A fresh store of the parametrised kind (Redis: the throwaway server, a prefix of its own)."""
    if request.param == "memory":
        return open_store(None, idle_seconds=60)
    return RedisStore(request.getfixturevalue("redis_url"), prefix=f"lim{next(_prefixes)}", idle_seconds=60)


def test_a_step_or_a_student_id_of_the_wrong_type_reads_nothing_even_where_answers_exist(store):
    """The contract: every method takes untrusted input and answers None / empty / False, never raises. The traps are
    values equal to a real step (``True == 1``, ``1.0 == 1``, ``"0"`` spelled into a Redis key) and ids that
    cannot be looked up (a list): the answers stored at steps 0 and 1 must not leak through them."""
    code, token = store.create(LESSON)
    IDS = ids(store, code)
    sid = IDS[0]
    assert store.answer(code, sid, 0, 2) and store.advance(code, token, 1) and store.answer(code, sid, 1, 6)
    assert store.my_answer(code, sid, 0) == 2 and store.my_answer(code, sid, 1) == 6
    assert store.answers(code, 0) == {2: 1} and store.answers(code, 1) == {6: 1}
    for step in (True, 1.0, "1", "0", b"0", [1], None, -1, 500):
        assert store.my_answer(code, sid, step) is None, step
        assert store.answers(code, step) == {}, step
        assert not store.answer(code, sid, step, 3) and not store.advance(code, token, step), step
    for bad in (["x"], {"student": 1}, b"student-0000", ("student-0000",), None, 12345678):
        assert store.my_answer(code, bad, 1) is None, bad
        assert not store.answer(code, bad, 1, 3) and not store.join(code, bad), bad
        assert not store.join(code, IDS[1], bad), bad
    for bad_code in ([code], code.lower(), f" {code}", code.encode(), {code: 1}, None):
        assert store.get(bad_code) is None and store.version(bad_code) is None, bad_code
        assert store.my_answer(bad_code, sid, 1) is None and store.answers(bad_code, 1) == {}, bad_code
        assert store.students(bad_code) == 0 and store.nicknames(bad_code) == [], bad_code
        assert not store.is_teacher(bad_code, token) and not store.advance(bad_code, token, 2), bad_code
        assert not store.answer(bad_code, IDS[2], 1, 1) and not store.join(bad_code, IDS[2]), bad_code
    for revealed in (1, "true", [True], None):
        assert not store.reveal(code, token, revealed), revealed
    st = store.get(code)
    assert (st.step, st.revealed, st.version) == (1, False, 2) and store.students(code) == 1
    assert store.answers(code, 1) == {6: 1} and store.my_answer(code, sid, 1) == 6


def test_a_class_whose_hash_is_gone_shows_no_answers_or_students_even_if_those_keys_remain(redis_url):
    """Redis may drop the class hash alone (an operator's DEL, eviction under ``maxmemory``): the class is then gone
    for every reader, its answer and student keys too, although they are still in Redis."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(redis_url, prefix="gone", idle_seconds=60)
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    assert s.join(code, IDS[0], "Ann") and s.answer(code, IDS[0], 0, 4)
    assert s.answers(code, 0) == {4: 1} and s.nicknames(code) == ["Ann"]
    r.delete(f"gone:class:{{{code}}}")
    assert r.exists(f"gone:class:{{{code}}}:students", f"gone:class:{{{code}}}:ans:0") == 2
    assert s.get(code) is None and s.version(code) is None and not s.is_teacher(code, token)
    assert s.answers(code, 0) == {} and s.my_answer(code, IDS[0], 0) is None
    assert s.students(code) == 0 and s.nicknames(code) == []
    assert not s.answer(code, IDS[1], 0, 1) and not s.join(code, IDS[1]) and not s.advance(code, token, 1)
    r.delete(*r.keys("gone:*"))


def test_a_hung_redis_cannot_hold_a_page_for_more_than_a_few_seconds():
    """A Redis that accepts and never answers (or a host that never accepts) must fail a call within seconds, so
    the page says the class store failed instead of hanging: the connections the client makes have finite, short
    connect and read timeouts, at most 3 s each (the requirement; the connection is made but never opened). An
    operator's ``?socket_timeout=`` in the URL sets the read timeout (redis-py: the URL wins) but not the connect
    timeout, which stays 3 s."""
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    conn = RedisStore(url, idle_seconds=60).r.connection_pool.make_connection()
    for what, seconds in (("read", conn.socket_timeout), ("connect", conn.socket_connect_timeout)):
        assert seconds is not None and 0 < seconds <= 3, (what, seconds)
    conn = RedisStore(url + "?socket_timeout=10", idle_seconds=60).r.connection_pool.make_connection()
    assert conn.socket_timeout == 10 and 0 < conn.socket_connect_timeout <= 3, conn.socket_connect_timeout
