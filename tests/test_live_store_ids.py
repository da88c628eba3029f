"""Issue 33 at the store: student ids the class issues and signs, and a teacher who ends a class or shortens its
life. Run against BOTH stores (test_live_store's ``make``: memory, and Redis on a throwaway ``redis-server``).

A forged id is any id the class did not issue: well-formed random ids, ids of the length and alphabet of an issued
one, an id another class issued, an issued id with one character of its signature or of its random part changed,
and the ids the pages used to accept (``forged-student-0000``). None joins, answers or reads an answer. The expected
counts are written out by hand."""
import secrets
import time

import pytest
import redis
import test_live_store
from test_live_store import LESSON

from gptviz.live import LEFT_CLASS_SECONDS, MAX_CHOICES, ClassStoreFull

redis_url, make = test_live_store.redis_url, test_live_store.make  # the fixtures (memory and Redis)


def flip(ch: str) -> str:
    return "A" if ch != "A" else "B"


def forged_ids(s, code: str, other_code: str) -> list[str]:
    real = s.new_student(code)
    return ([secrets.token_urlsafe(24) for _ in range(10)]  # 32 characters, as an issued id
            + [secrets.token_urlsafe(12) for _ in range(3)]  # 16: the ids the pages used to make
            + [f"forged-student-{i:04d}" for i in range(4)]  # what the issue's hostile student typed
            + [s.new_student(other_code), s.new_student(other_code)]  # issued, but by another class
            + [real[:-1] + flip(real[-1]), real[:20] + flip(real[20]) + real[21:], flip(real[0]) + real[1:]]
            + [real[:16] + s.new_student(code)[16:], real[:31], real + "A"])  # spliced, cut, longer


def test_forged_ids_join_nothing_answer_nothing_and_read_nothing(make):
    s = make()
    code, token = s.create(LESSON)
    other, _ = s.create(LESSON)
    forged = forged_ids(s, code, other)
    assert len(set(forged)) == len(forged) == 25
    for sid in forged:
        assert not s.issued(code, sid), sid
        assert not s.join(code, sid) and not s.join(code, sid, "Mallory"), sid
        assert not s.answer(code, sid, 0, 1), sid
        assert s.my_answer(code, sid, 0) is None, sid
    assert s.students(code) == 0 and s.answers(code, 0) == {} and s.nicknames(code) == []
    assert s.get(code).version == 1

    ann, bo = s.new_student(code), s.new_student(code)
    assert s.issued(code, ann) and not s.issued(other, ann), "an id opens only the class that issued it"
    assert s.join(code, ann, "Ann") and s.join(code, ann), "the same id twice is the same student"
    assert s.students(code) == 1 and s.nicknames(code) == ["Ann"]
    assert s.answer(code, ann, 0, 3) and s.answer(code, bo, 0, 3), "an issued id answers (and joins) at once"
    assert s.answers(code, 0) == {3: 2} and s.students(code) == 2, "two students, the same answer: 2"
    assert s.my_answer(code, ann, 0) == 3 and s.my_answer(code, bo, 0) == 3
    assert not s.join(other, ann) and not s.answer(other, ann, 0, 1) and s.students(other) == 0
    for sid in forged:  # after real students: still nothing, and theirs unchanged
        assert not s.answer(code, sid, 0, (3 + 1) % MAX_CHOICES) and not s.join(code, sid), sid
        assert s.my_answer(code, sid, 0) is None
    assert s.answers(code, 0) == {3: 2} and s.students(code) == 2
    assert s.new_student("ZZZZZZ") is None and s.new_student("bad") is None and s.new_student(None) is None
    assert s.advance(code, token, 1) and s.answer(code, ann, 1, 0) and s.answers(code, 1) == {0: 1}


def test_the_secret_is_never_in_a_class_state_and_issuing_an_id_adds_no_student(make):
    s = make()
    code, token = s.create(LESSON)
    st = s.get(code)
    assert set(vars(st)) == {"code", "lesson_id", "lang", "step", "revealed", "version", "created", "touched",
                             "settings", "idle"}
    issued = {s.new_student(code) for _ in range(30)}
    assert len(issued) == 30 and s.students(code) == 0, "issuing an id adds no student"


def test_the_teacher_ends_a_class_and_nobody_else_can(make):
    s = make(max_classes=2)
    code, token = s.create(LESSON)
    other, other_token = s.create(LESSON)
    ann = s.new_student(code)
    assert s.join(code, ann, "Ann") and s.answer(code, ann, 0, 2)
    for bad in (other_token, token[:-1] + flip(token[-1]), "", None, "x" * 32, token + "x"):
        assert not s.end(code, bad), bad
        assert not s.end(code, bad, only_if_empty=False), bad
    assert not s.end(code, token, only_if_empty=True), "a student joined: only_if_empty ends nothing"
    assert not s.end(code, token, "yes")
    st = s.get(code)
    assert st is not None and s.students(code) == 1 and s.answers(code, 0) == {2: 1} and s.is_teacher(code, token)
    with pytest.raises(ClassStoreFull):
        s.create(LESSON)
    assert s.end(code, token)
    assert s.get(code) is None and s.version(code) is None and s.students(code) == 0 and s.answers(code, 0) == {}
    assert s.new_student(code) is None and not s.join(code, ann) and s.my_answer(code, ann, 0) is None
    assert not s.end(code, token) and not s.is_teacher(code, token), "ended once"
    assert s.get(other) is not None, "the other class goes on"
    third, third_token = s.create(LESSON)  # the ended class no longer counts against max_classes=2
    assert s.end(third, third_token, only_if_empty=True) and s.get(third) is None, "an empty class ends"


def test_a_shortened_class_ends_after_its_short_idle_time_and_stops_counting(make):
    s = make(idle_seconds=60, max_classes=2)
    code, token = s.create(LESSON)
    keep, _ = s.create(LESSON)
    assert s.get(code).idle == 60.0
    assert s.expire(code, token, 7 * 24 * 3600) and s.get(code).idle == 60.0, (
        "the longest idle time allowed, a week, is accepted (and lengthens nothing)")
    for bad in (0, -1, True, "5", None, float("nan"), float("inf"), 8 * 24 * 3600):
        assert not s.expire(code, token, bad), bad
    assert not s.expire(code, "x" * 32, 0.6) and not s.expire(code, None, 0.6) and not s.expire("ZZZZZZ", token, 1)
    assert s.get(code).idle == 60.0, "a refused expire changes nothing"
    ann = s.new_student(code)
    assert s.join(code, ann) and s.expire(code, token, 0.6)
    assert s.get(code).idle == 0.6 and s.students(code) == 1
    assert s.expire(code, token, 30) and s.get(code).idle == 0.6, "expire never lengthens a class's life"
    assert s.get(code).idle < LEFT_CLASS_SECONDS
    time.sleep(0.3)
    assert s.answer(code, ann, 0, 1), "activity within the short idle time keeps the class"
    time.sleep(0.4)  # 0.7 s after the expire, 0.4 s after the answer
    assert s.answers(code, 0) == {1: 1}
    time.sleep(0.5)
    assert s.get(code) is None and s.students(code) == 0 and s.answers(code, 0) == {}
    assert s.get(keep) is not None and s.get(keep).idle == 60.0, "the other class keeps its idle time"
    s.create(LESSON)  # the ended class no longer counts against max_classes=2
    with pytest.raises(ClassStoreFull):
        s.create(LESSON)


def test_redis_end_deletes_every_key_of_the_class_and_expire_leaves_the_index_alone(redis_url):
    from gptviz.live.redis_store import RedisStore
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(redis_url, prefix="endx", idle_seconds=100)
    code, token = s.create(LESSON)
    keep, keep_token = s.create(LESSON)
    ann = s.new_student(code)
    assert s.join(code, ann) and s.answer(code, ann, 0, 1) and s.advance(code, token, 2) and s.answer(code, ann, 2, 4)
    assert s.expire(keep, keep_token, 5)
    assert s.get(keep).idle == 5.0 and r.hget(f"endx:class:{{{keep}}}", "idle") == "5000", "5 s, kept in ms"
    k = f"endx:class:{{{keep}}}"
    assert all(0 < r.pttl(x) <= 5000 for x in r.keys(k + "*")), "the shortened class's keys"
    assert 90_000 < r.pttl("endx:classes") <= 100_000, "the index of classes keeps the store's idle time"
    assert s.end(code, token)
    assert set(r.keys("endx:*")) == {k, "endx:classes"}
    assert r.zrange("endx:classes", 0, -1) == [keep]
    r.delete(*r.keys("endx:*"))


def test_an_answer_stored_under_an_id_the_class_did_not_issue_is_never_read_back(redis_url):
    """Redis may hold an answer under an unsigned id (written by a version before signed ids, or by hand): it still
    counts in the class's histogram as it was, but ``my_answer`` reads it for no one, and that id cannot change it."""
    from gptviz.live.redis_store import RedisStore
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    s = RedisStore(redis_url, prefix="olda", idle_seconds=60)
    code, _ = s.create(LESSON)
    real = s.new_student(code)
    forged = real[:-1] + flip(real[-1])
    r.hset(f"olda:class:{{{code}}}:ans:0", forged, "5")
    assert s.my_answer(code, forged, 0) is None and not s.answer(code, forged, 0, 2)
    assert s.answers(code, 0) == {5: 1}
    r.delete(*r.keys("olda:*"))
