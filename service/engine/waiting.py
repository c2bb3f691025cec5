"""Which waiting requests one encoder call takes when the queue is deep (service/engine/scheduler.py).

The scheduler's queue holds one group of tickets per submit (a text's words are one group); the groups take turns,
a ticket each. When half a batch or more waits, an encoder call takes a quarter batch of them at once (the rows that
free up, and those encoded ahead), and which ones is chosen here, by length.
"""

from __future__ import annotations

import collections

from attnserve.service.engine.tickets import Ticket

# how many tickets past the queue's head an encoder call chooses from by length, in calls' worth
CALL_WINDOW = 2
# how many such calls may pass a request over for its length before one takes it whatever its length
PASSED_OVER = 2


def pick_call(waiting: collections.deque[collections.deque[Ticket]], size: int, now: float) -> list[Ticket]:
    """Up to `size` requests for one encoder call, taken out of `waiting` (the scheduler's queue, under its lock), in
    turn order. The encoder pads every source of a call to the longest, and in queue order a call of eight
    made-up words is about a third padding; so the call takes the next request in turn, then, of the next `CALL_WINDOW` x
    `size` in turn, those whose sources are nearest its length, not longer where they can be. A group's tickets
    still go in their order (a later one only with those before it), and a group that gave one moves to the back,
    as a turn does; the others keep their places. The head of the queue goes every time, and so does a request
    passed over `PASSED_OVER` times already: none waits more than that many calls longer than in queue order,
    whatever its length. Cancelled and expired requests are not picked (the scheduler ends them next)."""
    reach = CALL_WINDOW * size
    window = [waiting.popleft() for _ in range(min(len(waiting), reach))]
    # (group, index in it), the order the queue would give them: every group's first ticket, then every second...
    depth = min(reach, max(map(len, window), default=0))
    turns = [(g, j) for j in range(depth) for g, group in enumerate(window) if j < len(group)][:reach]
    live = [(g, j) for g, j in turns if not (window[g][j].cancelled or now > window[g][j].deadline)]
    taken = [0] * len(window)  # how many of each group's first tickets the call takes
    if live:
        length = len(window[live[0][0]][live[0][1]].source_ids)

        def fit(gj: tuple[int, int]) -> tuple[bool, bool, int]:
            t = window[gj[0]][gj[1]]
            n = len(t.source_ids)
            return gj != live[0] and t.passed_over < PASSED_OVER, n > length, abs(n - length)

        chosen: set[tuple[int, int]] = set()
        for g, j in sorted(live, key=fit):  # stable: turn order among equals
            if j == taken[g]:  # a group's ticket only after those before it in the group
                chosen.add((g, j))
                taken[g] += 1
                if len(chosen) == size:
                    break
        call = [window[g][j] for g, j in turns if (g, j) in chosen]
        for g, j in live:
            if (g, j) not in chosen:
                window[g][j].passed_over += 1
    else:
        call = []
    waiting.extendleft(window[g] for g in reversed(range(len(window))) if not taken[g])
    for g, group in enumerate(window):
        for _ in range(taken[g]):
            group.popleft()
        if taken[g] and group:
            waiting.append(group)
    return call
