"""The live classroom's rules (gptviz/live/store.py) and the in-process store's clock (gptviz/live/memory_store.py):
the limits read from the environment, how a typed class code is read, the ids and tokens, the checks (with the
messages a teacher sees) and when an idle class is gone. Every expected value is written out here by hand from the
documented rules (the variable's default, its bounds, the code alphabet, the SHA-256 test vector of "abc"), never
read back from the code under test. The ``MemoryStore`` tests drive a fake clock, so the boundaries (idle exactly
``idle_seconds``, one step past it) are exact and no test sleeps."""
import re

import pytest

from gptviz.live import (
    CODE_ALPHABET,
    ClassStoreFull,
    good_student,
    good_token,
    memory_store,
    normalise_code,
)
from gptviz.live.memory_store import MemoryStore
from gptviz.live.store import (
    check_new_class,
    good_int,
    idle_seconds_from_env,
    max_classes_from_env,
    max_students_from_env,
    new_token,
    same_token,
    token_hash,
)

LESSON = "02_one_attention_head"


def ids(s, code: str, n: int = 8) -> list[str]:
    return [s.new_student(code) for _ in range(n)]
ENV = ("GPTVIZ_CLASS_IDLE_SECONDS", "GPTVIZ_MAX_CLASSES", "GPTVIZ_MAX_STUDENTS")


@pytest.fixture
def env(monkeypatch):
    """env(name, raw) sets one variable (None: unset); every variable starts unset."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)

    def set_(name, raw):
        if raw is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, raw)
    return set_


class Clock:
    """A clock the test moves by hand (epoch seconds)."""

    def __init__(self, t: float = 1_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# --- the limits from the environment -----------------------------------------------------------------------------

# (variable, reader, [(raw value, expected)]): the defaults are 4 h, 200 classes, 200 students; the bounds 0.05 s to
# 7 days, 1 to 100 000 classes, 1 to 10 000 students; anything that is not a number (or NaN) gives the default.
ENV_CASES = [
    ("GPTVIZ_CLASS_IDLE_SECONDS", idle_seconds_from_env, [
        (None, 14_400.0), ("", 14_400.0), ("   ", 14_400.0), ("soon", 14_400.0), ("nan", 14_400.0),
        (" 90 ", 90.0), ("2.5", 2.5), ("0.05", 0.05), ("0.01", 0.05), ("0", 0.05), ("-3", 0.05), ("-inf", 0.05),
        ("604800", 604_800.0), ("604801", 604_800.0), ("1e300", 604_800.0), ("inf", 604_800.0)]),
    ("GPTVIZ_MAX_CLASSES", max_classes_from_env, [
        (None, 200), ("", 200), ("many", 200), ("nan", 200), (" 12 ", 12), ("7.9", 7), ("1", 1), ("0", 1),
        ("-5", 1), ("100000", 100_000), ("100001", 100_000), ("inf", 100_000)]),
    ("GPTVIZ_MAX_STUDENTS", max_students_from_env, [
        (None, 200), ("", 200), ("lots", 200), ("nan", 200), (" 30 ", 30), ("2.99", 2), ("1", 1), ("0", 1),
        ("-1", 1), ("10000", 10_000), ("10001", 10_000), ("1e9", 10_000)]),
]


@pytest.mark.parametrize("name,reader,cases", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_each_limit_is_read_from_its_variable_clamped_to_its_bounds_and_defaulted_when_not_a_number(
        env, name, reader, cases):
    for raw, expected in cases:
        env(name, raw)
        for other in ENV:  # the other two variables, set to 3, must not be read instead
            if other != name:
                env(other, "3")
        got = reader()
        assert got == expected and (isinstance(got, int) or name == "GPTVIZ_CLASS_IDLE_SECONDS"), (raw, got)


def test_a_store_reads_the_limits_it_is_not_given_from_the_environment_and_the_given_ones_win(env):
    env("GPTVIZ_CLASS_IDLE_SECONDS", "90")
    env("GPTVIZ_MAX_CLASSES", "7")
    env("GPTVIZ_MAX_STUDENTS", "9")
    s = MemoryStore()
    assert (s.idle_seconds, s.max_classes, s.max_students) == (90.0, 7, 9)
    s = MemoryStore(idle_seconds=2, max_classes=3, max_students=4)
    assert (s.idle_seconds, s.max_classes, s.max_students) == (2.0, 3, 4)
    s = MemoryStore(max_students=4)
    assert (s.idle_seconds, s.max_classes, s.max_students) == (90.0, 7, 4)


# --- codes, ids, tokens ------------------------------------------------------------------------------------------

def test_a_typed_code_is_read_without_spaces_or_dashes_in_upper_case():
    """A person types "abc-def" or " AbC DeF "; up to 20 characters are read, anything longer is refused even when
    it holds a code (it is not one typed by hand)."""
    for typed in ("abc-def", " AbC DeF ", "ABCDEF", "a-b-c-d-e-f", "abc\tdef\n", "ABC" + " " * 14 + "DEF"):
        assert normalise_code(typed) == "ABCDEF", repr(typed)
    assert len("ABC" + " " * 14 + "DEF") == 20
    assert normalise_code("k7m-p2q") == "K7MP2Q"
    for bad in ("ABC" + " " * 15 + "DEF", "ABCDE0", "abcdeI", "ABCDE", "ABCDEFG", "", "  ", "ABC_DEF", None, 123,
                b"ABCDEF", ["ABCDEF"]):
        assert normalise_code(bad) is None, repr(bad)


def test_a_new_token_and_a_new_student_id_are_url_safe_and_as_long_as_their_random_bytes_give():
    """token_urlsafe(n) is base64 of n random bytes without padding: 24 bytes -> 32 characters (the teacher's
    token, 192 bits); a student id is 12 random bytes (16 characters) and 12 bytes of HMAC-SHA256 (16
    characters); both fit the checks that guard every call."""
    tokens = {new_token() for _ in range(50)}
    s = MemoryStore(clock=Clock())
    code, _ = s.create(LESSON)
    issued = set(ids(s, code, 50))
    assert len(tokens) == 50 and len(issued) == 50
    assert all(len(t) == 32 and re.fullmatch(r"[A-Za-z0-9_-]+", t) and good_token(t) for t in tokens)
    assert all(len(i) == 32 and re.fullmatch(r"[A-Za-z0-9_-]+", i) and good_student(i) for i in issued)
    assert len({i[:16] for i in issued}) == 50, "the random parts differ"


def test_a_student_id_is_its_random_part_then_the_hmac_of_the_code_and_that_part_under_the_class_secret():
    """Oracle: the signature computed here with ``hmac``/``hashlib``/``base64`` from the documented recipe
    (HMAC-SHA256, key the class's secret, message ``CODE:random part``, first 12 bytes, base64url), and RFC 4231's
    test case 2 for the library's HMAC-SHA256 itself."""
    import base64
    import hashlib
    import hmac
    rfc = hmac.new(b"Jefe", b"what do ya want for nothing?", hashlib.sha256).hexdigest()
    assert rfc == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    s = MemoryStore(clock=Clock())
    code, _ = s.create(LESSON)
    secret = s._classes[code].secret
    sid = s.new_student(code)
    nonce, sig = sid[:16], sid[16:]
    want = base64.urlsafe_b64encode(hmac.new(secret.encode(), f"{code}:{nonce}".encode(), hashlib.sha256)
                                    .digest()[:12]).decode()
    assert sig == want and s.issued(code, sid)
    assert secret not in repr(s.get(code)) and sid not in secret
    # Signed by the same recipe but with a random part of 8 or 12 characters (24 or 28 in all: well formed, and
    # the signature checks): the class never issues such an id (16 + 16 characters), so it is not one of its ids.
    for nonce in ("abcdefgh", "abcdefghijkl"):
        short = nonce + base64.urlsafe_b64encode(hmac.new(secret.encode(), f"{code}:{nonce}".encode(),
                                                          hashlib.sha256).digest()[:12]).decode()
        assert good_student(short) and len(short) == len(nonce) + 16
        assert not s.issued(code, short) and not s.join(code, short) and s.students(code) == 0, short


def test_the_token_is_kept_as_its_sha256_and_compared_only_when_well_formed():
    """Oracle: the published SHA-256 test vector of "abc" (FIPS 180-2)."""
    assert token_hash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    token = "T" * 20 + "-_xyz09"
    assert same_token(token, token_hash(token))
    assert not same_token(token, token_hash(token + "x"))
    assert not same_token(token, None) and not same_token(token, "")
    assert not same_token("short", token_hash("short")), "a malformed token never matches, even its own hash"
    assert not same_token(None, token_hash("None"))


def test_an_int_argument_is_a_real_int_within_its_half_open_range():
    assert good_int(0, 0, 5) and good_int(4, 0, 5)
    assert not good_int(5, 0, 5) and not good_int(-1, 0, 5)
    assert not good_int(True, 0, 5) and not good_int(False, 0, 5), "a bool is not a step or a choice"
    assert not good_int(1.0, 0, 5) and not good_int("1", 0, 5) and not good_int(None, 0, 5)


# --- the checks of a new class, with the messages a teacher sees --------------------------------------------------

LESSON_MSG = "a lesson id is 1 to 80 letters, digits, '_', '.' or '-'"
LANG_MSG = "a language is a code such as 'en', 'es' or 'pt-BR'"
SETTINGS_MSG = "the settings are a URL query string of at most 16384 characters"


def test_a_new_class_is_checked_and_a_bad_argument_says_what_is_expected():
    check_new_class("x" * 80, "pt-BR", "a" * 16384)
    check_new_class("a.b-c_9", "en")
    check_new_class(LESSON, "es", "preset=default&text=the+cat%21")
    for bad in ("x" * 81, "", "a b", "../x", None, 7):
        with pytest.raises(ValueError, match=f"^{re.escape(LESSON_MSG)}$"):
            check_new_class(bad, "en")
    for bad in ("EN", "e", "english", "pt_BR", "", None):
        with pytest.raises(ValueError, match=f"^{re.escape(LANG_MSG)}$"):
            check_new_class(LESSON, bad)
    for bad in ("a" * 16385, "a b", "x=é", None, 3):
        with pytest.raises(ValueError, match=f"^{re.escape(SETTINGS_MSG)}$"):
            check_new_class(LESSON, "en", bad)


def test_a_teacher_sees_why_a_class_could_not_start():
    s = MemoryStore(max_classes=2, clock=Clock())
    with pytest.raises(ValueError, match=f"^{re.escape(LESSON_MSG)}$"):
        s.create("no spaces please")
    with pytest.raises(ValueError, match=f"^{re.escape(LANG_MSG)}$"):
        s.create(LESSON, "EN")
    with pytest.raises(ValueError, match=f"^{re.escape(SETTINGS_MSG)}$"):
        s.create(LESSON, "en", "text=two words")
    s.create(LESSON)
    s.create(LESSON)
    with pytest.raises(ClassStoreFull, match="^this server already holds 2 classes$"):
        s.create(LESSON)


# --- the in-process store, on a fake clock ------------------------------------------------------------------------

def test_a_class_idle_for_exactly_idle_seconds_is_kept_and_one_idle_longer_is_gone():
    clock = Clock()
    s = MemoryStore(idle_seconds=10, clock=clock)
    code, token = s.create(LESSON)
    clock.t = 1_010.0  # idle exactly 10 s: not MORE than idle_seconds
    st = s.get(code)
    assert st is not None and st.touched == 1_000.0 and s.version(code) == 1
    clock.t = 1_010.001
    assert s.get(code) is None and s.version(code) is None and not s.is_teacher(code, token)
    clock.t = 1_000.0  # gone for good: dropped when read, not merely hidden
    assert s.get(code) is None


def test_created_and_touched_come_from_the_clock_and_only_activity_moves_touched():
    """Oracle: the clock's value at each call, written out; a read (get, version, answers...) is not activity."""
    clock = Clock(5_000.0)
    s = MemoryStore(idle_seconds=10_000, clock=clock)
    code, token = s.create(LESSON, "es", "a=1")
    IDS = ids(s, code)
    st = s.get(code)
    assert (st.created, st.touched, st.step, st.revealed, st.version, st.settings) == (5_000.0, 5_000.0, 0, False,
                                                                                          1, "a=1")
    clock.t = 5_003.0
    s.get(code), s.version(code), s.answers(code, 0), s.students(code), s.nicknames(code)
    s.my_answer(code, IDS[0], 0), s.is_teacher(code, token)
    assert s.get(code).touched == 5_000.0, "reading a class must not keep it alive"
    steps = [("answer", lambda: s.answer(code, IDS[0], 0, 1)), ("join", lambda: s.join(code, IDS[1], "Bo")),
             ("advance", lambda: s.advance(code, token, 2)), ("reveal", lambda: s.reveal(code, token))]
    for i, (what, call) in enumerate(steps):
        clock.t = 5_010.0 + 10 * i
        assert call(), what
        assert s.get(code).touched == clock.t and s.get(code).created == 5_000.0, what
    clock.t = 6_000.0
    assert not s.advance(code, "x" * 32, 3) and not s.answer(code, IDS[2], 2, 1) and not s.join(code, "bad id!")
    st = s.get(code)
    assert (st.touched, st.step, st.revealed, st.version) == (5_040.0, 2, True, 3), "a refused call is no activity"


def test_activity_keeps_a_class_alive_past_idle_seconds_from_its_creation():
    clock = Clock()
    s = MemoryStore(idle_seconds=10, clock=clock)
    code, token = s.create(LESSON)
    IDS = ids(s, code)
    for t in (1_008.0, 1_016.0, 1_024.0):
        clock.t = t
        assert s.answer(code, IDS[0], 0, 2)
    clock.t = 1_034.0  # 34 s after creation, 10 s after the last answer
    assert s.my_answer(code, IDS[0], 0) == 2 and s.answers(code, 0) == {2: 1} and s.students(code) == 1
    clock.t = 1_034.5
    assert s.answers(code, 0) == {} and s.my_answer(code, IDS[0], 0) is None and s.students(code) == 0
    assert s.nicknames(code) == [] and not s.join(code, IDS[1]) and not s.reveal(code, token)


def test_an_expired_class_stops_counting_against_max_classes_only_once_idle_longer_than_idle_seconds():
    clock = Clock()
    s = MemoryStore(idle_seconds=10, max_classes=1, clock=clock)
    old, _ = s.create(LESSON)
    clock.t = 1_010.0  # exactly idle_seconds: still live, still counts
    with pytest.raises(ClassStoreFull, match="^this server already holds 1 classes$"):
        s.create(LESSON)
    clock.t = 1_010.5
    new, _ = s.create(LESSON)
    assert s.get(new).created == 1_010.5
    clock.t = 1_000.0  # the old class was swept by create, not only hidden by the clock
    assert s.get(old) is None or old == new


def test_a_new_code_is_drawn_again_while_it_is_taken(monkeypatch):
    drawn = iter(["ABCDEF", "ABCDEF", "ABCDEF", "GHJKLM"])
    monkeypatch.setattr(memory_store, "new_code", lambda: next(drawn))
    s = MemoryStore(clock=Clock())
    first, t1 = s.create(LESSON)
    second, t2 = s.create(LESSON, "es")
    assert (first, second) == ("ABCDEF", "GHJKLM")
    assert s.get(first).lang == "en" and s.get(second).lang == "es" and s.is_teacher(first, t1)
    assert s.is_teacher(second, t2) and not s.is_teacher(second, t1)
    assert set(first + second) <= set(CODE_ALPHABET)


def test_a_full_class_refuses_a_new_student_at_exactly_max_students_but_not_one_below():
    s = MemoryStore(max_students=3, clock=Clock())
    code, _ = s.create(LESSON)
    IDS = ids(s, code)
    assert s.join(code, IDS[0], "A") and s.answer(code, IDS[1], 0, 4)
    assert s.students(code) == 2
    assert s.join(code, IDS[2], "C"), "the third of three fits"
    assert not s.join(code, IDS[3], "D") and not s.answer(code, IDS[3], 0, 1)
    assert s.students(code) == 3 and s.nicknames(code) == ["A", "C"] and s.answers(code, 0) == {4: 1}
    assert s.join(code, IDS[1], "B") and s.nicknames(code) == ["A", "B", "C"], "a joined student may rename"
