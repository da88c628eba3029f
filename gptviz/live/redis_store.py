"""``RedisStore``: the live classroom's classes in Redis (``GPTVIZ_REDIS_URL``), so several replicas of the app
share them and a replica's restart loses nothing. Every update that writes more than one field or key is one Lua
script (atomic on the server); the teacher's token is checked (hash against hash, ``hmac.compare_digest``) before
the script runs: a token never changes, and the script itself refuses a class that has expired meanwhile.

Keys (``{code}`` is a Redis hash tag; one Redis, or a primary with replicas, not Redis Cluster, because of the
index of classes): ``<prefix>:class:{CODE}`` a hash (lesson_id, lang, step, revealed, version, created, touched,
settings, token = the token's SHA-256, secret = the key of the class's student ids, idle = the class's idle time in
ms), ``…:students`` a hash student id -> nickname, ``…:ans:<step>`` a hash student id -> choice, ``…:steps`` the
set of steps answered, and ``<prefix>:classes`` a sorted set code -> when the class ends unless touched again (to
bound the number of classes). Every activity sets every key of the class to expire its idle time later
(``idle_seconds``, or less after ``expire``). A student id is checked (its signature, against the secret read
first: a secret never changes) before a script runs.
"""
from __future__ import annotations

import time
from typing import Optional

import redis

from .store import (
    MAX_CHOICES,
    MAX_STEP,
    ClassState,
    ClassStore,
    ClassStoreFull,
    ClassStoreUnavailable,
    check_new_class,
    good_code,
    good_int,
    good_nickname,
    good_seconds,
    good_student,
    issue_student,
    new_code,
    new_secret,
    new_token,
    same_token,
    signed_student,
    token_hash,
)

# KEYS: class, students, steps, index · ARGV[1] now, ARGV[2] idle ms, ARGV[3] code, then the script's own
# (the class's own idle time, its hash's ``idle``, may be shorter than the store's: see ``expire``)
_TOUCH = """
local function touch()
  local idle = tonumber(redis.call('HGET', KEYS[1], 'idle') or ARGV[2])
  redis.call('HSET', KEYS[1], 'touched', ARGV[1])
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], idle) end
  for _, s in ipairs(redis.call('SMEMBERS', KEYS[3])) do redis.call('PEXPIRE', KEYS[1] .. ':ans:' .. s, idle) end
  redis.call('ZADD', KEYS[4], tonumber(ARGV[1]) + idle / 1000, ARGV[3])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
"""
# ARGV[4] lesson id, ARGV[5] lang, ARGV[6] token hash, ARGV[7] max classes, ARGV[8] settings, ARGV[9] secret
_CREATE = """
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[7]) then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'lesson_id', ARGV[4], 'lang', ARGV[5], 'step', 0, 'revealed', 0, 'version', 1,
           'created', ARGV[1], 'touched', ARGV[1], 'token', ARGV[6], 'settings', ARGV[8], 'secret', ARGV[9],
           'idle', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[4], tonumber(ARGV[1]) + tonumber(ARGV[2]) / 1000, ARGV[3])
redis.call('PEXPIRE', KEYS[4], ARGV[2])
return 1
"""
# ARGV[4] a new secret: a class hash from before the secrets gets one on its first new student
_SECRET = """
if redis.call('HEXISTS', KEYS[1], 'version') == 0 then return false end
redis.call('HSETNX', KEYS[1], 'secret', ARGV[4])
return redis.call('HGET', KEYS[1], 'secret')
"""
# ARGV[4] token hash, ARGV[5] 1: only when no student joined
_END = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[4] then return 0 end
if ARGV[5] == '1' and redis.call('HLEN', KEYS[2]) > 0 then return 0 end
for _, s in ipairs(redis.call('SMEMBERS', KEYS[3])) do redis.call('DEL', KEYS[1] .. ':ans:' .. s) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[3])
return 1
"""
# ARGV[4] token hash, ARGV[5] the new idle time in ms (kept only when shorter)
_EXPIRE = _TOUCH + """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[4] then return 0 end
if tonumber(ARGV[5]) < tonumber(redis.call('HGET', KEYS[1], 'idle') or ARGV[2]) then
  redis.call('HSET', KEYS[1], 'idle', ARGV[5])
end
touch()
return 1
"""
# ARGV[4] step
_ADVANCE = _TOUCH + """
redis.call('HSET', KEYS[1], 'step', ARGV[4], 'revealed', 0)
redis.call('HINCRBY', KEYS[1], 'version', 1)
touch()
return 1
"""
# ARGV[4] 1 or 0
_REVEAL = _TOUCH + """
redis.call('HSET', KEYS[1], 'revealed', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'version', 1)
touch()
return 1
"""
# ARGV[4] student, ARGV[5] nickname, ARGV[6] max students
_JOIN = _TOUCH + """
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 0 and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[6]) then
  return 0
end
if ARGV[5] ~= '' or redis.call('HEXISTS', KEYS[2], ARGV[4]) == 0 then redis.call('HSET', KEYS[2], ARGV[4], ARGV[5]) end
touch()
return 1
"""
# ARGV[4] student, ARGV[5] step, ARGV[6] choice, ARGV[7] max students
_ANSWER = _TOUCH + """
local st = redis.call('HMGET', KEYS[1], 'step', 'revealed')
if st[2] == '1' or st[1] ~= ARGV[5] then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 0 then
  if redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[7]) then return 0 end
  redis.call('HSET', KEYS[2], ARGV[4], '')
end
redis.call('HSET', KEYS[1] .. ':ans:' .. ARGV[5], ARGV[4], ARGV[6])
redis.call('SADD', KEYS[3], ARGV[5])
touch()
return 1
"""


class RedisStore(ClassStore):
    def __init__(self, url: str, idle_seconds: Optional[float] = None, max_classes: Optional[int] = None,
                 max_students: Optional[int] = None, prefix: str = "gptviz", client: Optional[redis.Redis] = None):
        super().__init__(idle_seconds, max_classes, max_students)
        self.prefix = prefix
        self.r = client or redis.Redis.from_url(url, decode_responses=True, socket_timeout=3,
                                                socket_connect_timeout=3, health_check_interval=30)
        self._scripts = {name: self.r.register_script(lua) for name, lua in
                         [("create", _CREATE), ("advance", _ADVANCE), ("reveal", _REVEAL), ("join", _JOIN),
                          ("answer", _ANSWER), ("secret", _SECRET), ("end", _END), ("expire", _EXPIRE)]}

    def _keys(self, code: str) -> list[str]:
        k = f"{self.prefix}:class:{{{code}}}"
        return [k, k + ":students", k + ":steps", f"{self.prefix}:classes"]

    def _script(self, name: str, code: str, *args):
        argv = [repr(time.time()), max(1, int(self.idle_seconds * 1000)), code, *args]
        try:
            return self._scripts[name](keys=self._keys(code), args=argv)
        except redis.RedisError as e:
            raise ClassStoreUnavailable(f"the class store (Redis) failed: {type(e).__name__}") from None

    def _run(self, name: str, code: str, *args) -> int:
        return int(self._script(name, code, *args))

    def _secret(self, code: str) -> Optional[str]:
        return self._call(self.r.hget, self._keys(code)[0], "secret")

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except redis.RedisError as e:
            raise ClassStoreUnavailable(f"the class store (Redis) failed: {type(e).__name__}") from None

    def _teacher(self, code: str, token: str) -> bool:
        return good_code(code) and same_token(token, self._call(self.r.hget, self._keys(code)[0], "token"))

    # --- the contract ----------------------------------------------------------------------------------------------
    def create(self, lesson_id: str, lang: str = "en", settings: str = "") -> tuple[str, str]:
        check_new_class(lesson_id, lang, settings)
        token = new_token()
        for _ in range(20):
            code = new_code()
            done = self._run("create", code, lesson_id, lang, token_hash(token), self.max_classes, settings,
                             new_secret())
            if done == -1:
                raise ClassStoreFull(f"the class store already holds {self.max_classes} classes")
            if done == 1:
                return code, token
        raise ClassStoreFull("no free class code was found in 20 tries")

    def get(self, code: str) -> Optional[ClassState]:
        if not good_code(code):
            return None
        h = self._call(self.r.hgetall, self._keys(code)[0])
        if not h or "version" not in h:
            return None
        return ClassState(code, h["lesson_id"], h["lang"], int(h["step"]), h["revealed"] == "1", int(h["version"]),
                          float(h["created"]), float(h["touched"]), h.get("settings", ""),
                          int(h.get("idle") or max(1, int(self.idle_seconds * 1000))) / 1000)

    def version(self, code: str) -> Optional[int]:
        if not good_code(code):
            return None
        v = self._call(self.r.hget, self._keys(code)[0], "version")
        return None if v is None else int(v)

    def is_teacher(self, code: str, token: str) -> bool:
        return self._teacher(code, token)

    def advance(self, code: str, token: str, step: int) -> bool:
        if not good_int(step, 0, MAX_STEP) or not self._teacher(code, token):
            return False
        return self._run("advance", code, step) == 1

    def reveal(self, code: str, token: str, revealed: bool = True) -> bool:
        if not isinstance(revealed, bool) or not self._teacher(code, token):
            return False
        return self._run("reveal", code, int(revealed)) == 1

    def answer(self, code: str, student_id: str, step: int, choice: int) -> bool:
        if not (good_code(code) and good_student(student_id) and good_int(step, 0, MAX_STEP)
                and good_int(choice, 0, MAX_CHOICES) and self.issued(code, student_id)):
            return False
        return self._run("answer", code, student_id, step, choice, self.max_students) == 1

    def _answer_map(self, code: str, step: int) -> tuple[dict[str, str], Optional[str]]:
        """Who chose what at this step, and the class's secret (({}, None): no class)."""
        k = self._keys(code)[0]
        pipe = self.r.pipeline(transaction=True)
        pipe.exists(k)
        pipe.hgetall(f"{k}:ans:{step}")
        pipe.hget(k, "secret")
        exists, chosen, secret = self._call(pipe.execute)
        return (chosen, secret) if exists else ({}, None)

    def answers(self, code: str, step: int) -> dict[int, int]:
        if not (good_code(code) and good_int(step, 0, MAX_STEP)):
            return {}
        counts: dict[int, int] = {}
        for choice in self._answer_map(code, step)[0].values():
            counts[int(choice)] = counts.get(int(choice), 0) + 1
        return counts

    def my_answer(self, code: str, student_id: str, step: int) -> Optional[int]:
        if not (good_code(code) and good_student(student_id) and good_int(step, 0, MAX_STEP)):
            return None
        chosen, secret = self._answer_map(code, step)
        choice = chosen.get(student_id) if signed_student(secret, code, student_id) else None
        return None if choice is None else int(choice)

    def join(self, code: str, student_id: str, nickname: str = "") -> bool:
        if not (good_code(code) and good_student(student_id) and good_nickname(nickname)
                and self.issued(code, student_id)):
            return False
        return self._run("join", code, student_id, nickname.strip(), self.max_students) == 1

    def _students(self, code: str) -> dict[str, str]:
        if not good_code(code):
            return {}
        k, s = self._keys(code)[:2]
        pipe = self.r.pipeline(transaction=True)
        pipe.exists(k)
        pipe.hgetall(s)
        exists, students = self._call(pipe.execute)
        return students if exists else {}

    def students(self, code: str) -> int:
        return len(self._students(code))

    def nicknames(self, code: str) -> list[str]:
        return sorted(n for n in self._students(code).values() if n)

    def new_student(self, code: str) -> Optional[str]:
        if not good_code(code):
            return None
        secret = self._script("secret", code, new_secret())
        return None if not secret else issue_student(secret, code)

    def issued(self, code: str, student_id: str) -> bool:
        return good_code(code) and good_student(student_id) and signed_student(self._secret(code), code, student_id)

    def end(self, code: str, token: str, only_if_empty: bool = False) -> bool:
        if not isinstance(only_if_empty, bool) or not self._teacher(code, token):
            return False
        return self._run("end", code, token_hash(token), int(only_if_empty)) == 1

    def expire(self, code: str, token: str, seconds: float) -> bool:
        if not good_seconds(seconds) or not self._teacher(code, token):
            return False
        return self._run("expire", code, token_hash(token), max(1, int(seconds * 1000))) == 1
