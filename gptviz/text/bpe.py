"""Applying BPE merges to a long sequence fast, with exactly the result of the simple loop.

The simple rule (``CharBPETokenizer.encode``): find the earliest-learned merge whose pair occurs in the
sequence, merge every occurrence of it left to right, and repeat. Done literally that costs one pass
over the whole sequence per merge applied, which is fine for a sentence and hopeless for a 4 MB
corpus. ``apply_merges`` does the same in rounds over a linked list with a heap of candidate pairs:
each round takes the lowest rank present and merges its occurrences in position order; pairs that a
round creates join the heap only when the round is over, just as the simple loop looks for the next
merge only after it finished the current one. The tests check both give the same ids.
"""
from __future__ import annotations

import heapq


def apply_merges(seq: list[int], ranks: dict[tuple[int, int], tuple[int, int]]) -> list[int]:
    """``seq`` with the merges ``ranks[(a, b)] = (rank, merged id)`` applied by rank order."""
    n = len(seq)
    if n < 2 or not ranks:
        return list(seq)
    tok = list(seq)
    nxt = list(range(1, n + 1))  # n = end of list
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap = [(ranks[(tok[i], tok[i + 1])][0], i) for i in range(n - 1) if (tok[i], tok[i + 1]) in ranks]
    heapq.heapify(heap)

    def candidate(i: int):
        j = nxt[i]
        if j < n:
            r = ranks.get((tok[i], tok[j]))
            if r is not None:
                return (r[0], i)
        return None

    while heap:
        rank = heap[0][0]
        created = []
        while heap and heap[0][0] == rank:
            _, i = heapq.heappop(heap)
            if not alive[i]:
                continue
            j = nxt[i]
            if j >= n:
                continue
            r = ranks.get((tok[i], tok[j]))
            if r is None or r[0] != rank:
                continue  # stale: this pair changed since it was pushed
            tok[i] = r[1]
            alive[j] = False
            k = nxt[j]
            nxt[i] = k
            if k < n:
                prv[k] = i
            created.append(i)
        for i in created:
            if not alive[i]:
                continue
            for c in (candidate(prv[i]) if prv[i] >= 0 else None, candidate(i)):
                if c is not None:
                    heapq.heappush(heap, c)
    out = []
    i = 0
    while i < n:
        out.append(tok[i])
        i = nxt[i]
    return out
