"""The live classroom's store contract (gptviz/live), run against BOTH stores: ``MemoryStore`` in the process and
``RedisStore`` on a throwaway ``redis-server`` started here on 127.0.0.1 (a free port, no persistence) and
stopped after. The Redis half is skipped only when ``redis-server`` is not installed, and fails then when ``CI``
is set. The expected counts are worked out by hand in each test (a dict of who answered what), never read back
from the store's own helpers."""
import os
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter

import pytest

from gptviz.live import CODE_ALPHABET, MAX_CHOICES, ClassStoreFull, open_store
from gptviz.live.memory_store import MemoryStore

LESSON = "02_one_attention_head"


def ids(s, code: str, n: int = 64) -> list[str]:
    """``n`` student ids issued by class ``code`` (only issued ids join or answer: see the forged-id tests)."""
    out = [s.new_student(code) for _ in range(n)]
    assert len(set(out)) == n and all(isinstance(i, str) and len(i) == 32 for i in out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    exe = shutil.which("redis-server")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI is set: the Redis store must be tested in CI")
        pytest.skip("redis-server is not installed (apt-get install redis-server): the Redis half is not run")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("redis-server did not start within 5 s")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


_prefixes = iter(range(10**6))


@pytest.fixture(params=["memory", "redis"])
def make(request):
    """make(**limits) -> a fresh, empty store of the parametrised kind."""
    if request.param == "memory":
        return lambda **limits: open_store(None, **limits)
    url = request.getfixturevalue("redis_url")

    def redis_store(**limits):
        from gptviz.live.redis_store import RedisStore
        return RedisStore(url, prefix=f"t{next(_prefixes)}", **limits)
    return redis_store


def test_open_store_picks_memory_without_a_url_and_redis_with_one(redis_url, monkeypatch):
    from gptviz.live.redis_store import RedisStore
    monkeypatch.delenv("GPTVIZ_REDIS_URL", raising=False)
    assert isinstance(open_store(), MemoryStore)
    monkeypatch.setenv("GPTVIZ_REDIS_URL", redis_url)
    assert isinstance(open_store(), RedisStore)
    monkeypatch.setenv("GPTVIZ_REDIS_URL", "  ")
    assert isinstance(open_store(), MemoryStore)


def test_the_store_allows_as_many_choices_as_a_question_has():
    from gptviz.present.lessons import MAX_CHOICES as QUESTION_CHOICES
    assert MAX_CHOICES == QUESTION_CHOICES


def test_a_new_class_has_a_short_unambiguous_code_a_secret_token_and_starts_at_step_0(make):
    s = make()
    codes = set()
    for _ in range(20):
        code, token = s.create(LESSON, "es")
        codes.add(code)
        assert len(code) == 6 and set(code) <= set(CODE_ALPHABET) and not set(code) & set("01OI")
        assert len(token) >= 32 and token not in code
        st = s.get(code)
        assert (st.code, st.lesson_id, st.lang, st.step, st.revealed, st.version) == (code, LESSON, "es", 0,
                                                                                          False, 1)
        assert abs(st.created - time.time()) < 5 and st.touched == st.created
    assert len(codes) == 20
    assert s.get(code).settings == ""
    code, _ = s.create(LESSON, "en", "preset=default&text=the+cat%21")
    assert s.get(code).settings == "preset=default&text=the+cat%21", "the teacher's settings, for typed codes"
    for bad in ("a b", "x=\n", "é=1", "x" * 16385, None):
        with pytest.raises(ValueError):
            s.create(LESSON, "en", bad)
    assert s.get("ZZZZZZ") is None and s.version("ZZZZZZ") is None
    for bad in ("", "abcdef", "ABCDE0", "ABCDEFG", None, 12, "ABC DE"):
        assert s.get(bad) is None and s.version(bad) is None and s.students(bad) == 0


def test_one_answer_per_student_changeable_until_the_reveal(make):
    s = make()
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    chosen = {}
    for i, sid in enumerate(IDS[:10]):
        assert s.join(code, sid, f"kid {i}")
        assert s.answer(code, sid, 0, i % 3)
        chosen[sid] = i % 3
    for sid in IDS[:4]:  # four change their minds, one of them twice
        assert s.answer(code, sid, 0, 5)
        chosen[sid] = 5
    assert s.answer(code, IDS[0], 0, 7)
    chosen[IDS[0]] = 7
    assert s.answers(code, 0) == dict(Counter(chosen.values()))
    assert sum(s.answers(code, 0).values()) == 10 and s.students(code) == 10
    assert s.my_answer(code, IDS[0], 0) == 7 and s.my_answer(code, IDS[20], 0) is None
    v = s.version(code)
    assert s.answer(code, IDS[5], 0, 1) and s.version(code) == v, "answers must not wake the followers"
    chosen[IDS[5]] = 1
    assert s.reveal(code, token)
    assert s.get(code).revealed and s.version(code) == v + 1
    assert not s.answer(code, IDS[1], 0, 0), "an answer after the reveal must be refused"
    assert not s.answer(code, IDS[30], 0, 0)
    assert s.answers(code, 0) == dict(Counter(chosen.values()))


def test_answers_only_for_the_current_step_and_kept_per_step(make):
    s = make()
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    assert s.answer(code, IDS[0], 0, 2)
    assert not s.answer(code, IDS[0], 1, 2), "step 1 is not the class's step yet"
    assert s.advance(code, token, 1)
    assert not s.get(code).revealed
    assert s.answer(code, IDS[0], 1, 4) and s.answer(code, IDS[1], 1, 4)
    assert not s.answer(code, IDS[2], 0, 1), "step 0 is over"
    assert s.answers(code, 0) == {2: 1} and s.answers(code, 1) == {4: 2} and s.answers(code, 2) == {}
    assert s.reveal(code, token) and s.advance(code, token, 0)
    assert s.get(code).revealed is False, "advance clears the reveal"
    assert s.answer(code, IDS[2], 0, 1) and s.answers(code, 0) == {2: 1, 1: 1}


def test_only_the_teacher_token_advances_or_reveals(make):
    s = make()
    code, token = s.create(LESSON)
    other_code, other_token = s.create(LESSON)
    forged = [token[:-1] + ("A" if token[-1] != "A" else "B"), other_token, "", "x" * 32, None, token + "x",
              token.upper() if token.upper() != token else token.lower(), "short"]
    for bad in forged:
        assert not s.advance(code, bad, 3), bad
        assert not s.reveal(code, bad), bad
        assert not s.is_teacher(code, bad), bad
    st = s.get(code)
    assert (st.step, st.revealed, st.version) == (0, False, 1)
    assert not s.advance(other_code, token, 1), "a token opens only its own class"
    assert s.is_teacher(code, token) and s.advance(code, token, 3) and s.get(code).step == 3
    assert s.reveal(code, token) and s.reveal(code, token, False) and not s.get(code).revealed
    assert s.version(code) == 4
    assert not s.advance("ZZZZZZ", token, 1)


def test_bad_arguments_are_refused_without_raising(make):
    s = make()
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    assert not s.advance(code, token, -1) and not s.advance(code, token, 10**6) and not s.advance(code, token, "1")
    assert not s.advance(code, token, True) and not s.reveal(code, token, "yes")
    for choice in (-1, MAX_CHOICES, 10**9, 1.0, "1", True, None):
        assert not s.answer(code, IDS[0], 0, choice), choice
    for sid in ("", "short", "x" * 33, "has space!", "<script>", None, "ünïcödé-id"):
        assert not s.answer(code, sid, 0, 1) and not s.join(code, sid), sid
    for nick in ("x" * 25, "<b>bold</b>", "a\nb", "tab\there", 5, "\u202eevil"):
        assert not s.join(code, IDS[0], nick), nick
    assert s.join(code, IDS[0], "José O'Neil-Ng") and s.join(code, IDS[1], "李华") and s.join(code, IDS[2])
    assert s.nicknames(code) == sorted(["José O'Neil-Ng", "李华"])
    assert s.answers(code, 0) == {} and s.students(code) == 3
    with pytest.raises(ValueError):
        s.create("../../etc/passwd")
    with pytest.raises(ValueError):
        s.create(LESSON, "<en>")


def test_bounds_on_classes_and_students(make):
    s = make(max_classes=3, max_students=5)
    code, _ = s.create(LESSON)
    IDS = ids(s, code)
    s.create(LESSON)
    s.create(LESSON)
    with pytest.raises(ClassStoreFull):
        s.create(LESSON)
    for sid in IDS[:5]:
        assert s.join(code, sid)
    assert not s.join(code, IDS[5]) and not s.answer(code, IDS[5], 0, 1), "the class is full"
    assert s.join(code, IDS[0], "again") and s.answer(code, IDS[0], 0, 1), "a joined student still may"
    assert s.students(code) == 5


def test_an_idle_class_expires_and_activity_keeps_it(make):
    s = make(idle_seconds=0.6, max_classes=1)
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    for _ in range(4):  # 4 x 0.3 s > 0.6 s, but each answer refreshes the class
        time.sleep(0.3)
        assert s.answer(code, IDS[0], 0, 1)
    assert s.answers(code, 0) == {1: 1}
    time.sleep(0.9)
    assert s.get(code) is None and s.version(code) is None and s.answers(code, 0) == {} and s.students(code) == 0
    assert not s.advance(code, token, 1) and not s.join(code, IDS[1])
    s.create(LESSON)  # the expired class no longer counts against max_classes=1


def test_concurrent_answers_from_threads_count_once_each(make):
    s = make()
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    final = {sid: (i * 7) % MAX_CHOICES for i, sid in enumerate(IDS[:48])}
    barrier = threading.Barrier(8)
    errors = []

    def student_group(g: int):
        try:
            barrier.wait()
            for sid in IDS[g:48:8]:
                for first in range(3):  # each changes their answer twice, then gives the final one
                    s.answer(code, sid, 0, first)
                assert s.answer(code, sid, 0, final[sid])
        except Exception as e:  # noqa: BLE001 - reported after the join
            errors.append(e)

    threads = [threading.Thread(target=student_group, args=(g,)) for g in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert s.answers(code, 0) == dict(Counter(final.values()))
    assert s.students(code) == 48


def test_redis_keys_carry_a_ttl_and_the_token_is_stored_only_as_a_hash(redis_url):
    import redis

    from gptviz.live.redis_store import RedisStore
    s = RedisStore(redis_url, prefix="ttl", idle_seconds=100)
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    s.answer(code, IDS[0], 0, 1)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = r.keys("ttl:*")
    assert len(keys) >= 4 and all(0 < r.pttl(k) <= 100_000 for k in keys), {k: r.pttl(k) for k in keys}
    assert token not in str(r.hgetall(f"ttl:class:{{{code}}}"))
    # a second replica (a second client on the same Redis) sees the same class, answers and teacher
    other = RedisStore(redis_url, prefix="ttl", idle_seconds=100)
    assert other.answers(code, 0) == {1: 1} and other.advance(code, token, 2) and s.get(code).step == 2


def test_answered_counts_students_so_two_alike_answers_count_twice(make):
    """Two students with the SAME answer are two answers, not one choice: the oracle is a list of who chose what
    written out here, counted by hand (``Counter``), and the number answered is the number of students."""
    s = make()
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    assert s.answer(code, IDS[0], 0, 3) and s.answer(code, IDS[1], 0, 3)
    assert s.answers(code, 0) == {3: 2} and sum(s.answers(code, 0).values()) == 2
    assert s.my_answer(code, IDS[0], 0) == 3 and s.my_answer(code, IDS[1], 0) == 3
    assert s.students(code) == 2
    # the next step: three students, two of them alike (and not the first two, and not choice 0)
    assert s.advance(code, token, 1)
    chosen = {IDS[7]: 5, IDS[8]: 2, IDS[9]: 5}
    for sid, choice in chosen.items():
        assert s.join(code, sid) and s.answer(code, sid, 1, choice)
    assert s.answers(code, 1) == {5: 2, 2: 1} and sum(s.answers(code, 1).values()) == 3
    # one changes their mind to the same answer as another: still three students, now all three alike
    assert s.answer(code, IDS[8], 1, 5)
    assert s.answers(code, 1) == {5: 3}
    assert s.answers(code, 0) == {3: 2}, "the earlier step keeps its two alike answers"
    assert s.reveal(code, token) and s.answers(code, 1) == {5: 3}


def test_rejoining_with_an_empty_nickname_keeps_the_old_one(make):
    """A reload joins again with no nickname (the address carries only the student's id): the nickname the
    student gave stays. Only a new, non-empty nickname replaces it; an answer (which joins) keeps it too."""
    s = make()
    code, _ = s.create(LESSON)
    IDS = ids(s, code)
    assert s.join(code, IDS[0], "Ann") and s.nicknames(code) == ["Ann"]
    assert s.join(code, IDS[0], "") and s.nicknames(code) == ["Ann"], "an empty nickname must keep the old one"
    assert s.join(code, IDS[0]) and s.join(code, IDS[0], "   ") and s.nicknames(code) == ["Ann"]
    assert s.answer(code, IDS[0], 0, 1) and s.nicknames(code) == ["Ann"]
    assert s.students(code) == 1
    assert s.join(code, IDS[1], "") and s.join(code, IDS[1], "Bea") and s.join(code, IDS[1], "")
    assert s.nicknames(code) == ["Ann", "Bea"] and s.students(code) == 2
    assert s.join(code, IDS[0], "Cy") and s.join(code, IDS[0], "") and s.nicknames(code) == ["Bea", "Cy"]
    assert s.students(code) == 2
