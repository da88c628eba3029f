"""A place in a shared queue, on the screen: "Waiting for a training slot: 2 runs ahead of you".

Wraps ``gptviz.run.slots``: while a session waits, its place is redrawn every half second (each redraw is also
where Streamlit stops a waiting run whose user pressed Stop, changed something or left: it then leaves the
queue); once it holds the slot the note goes away.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import streamlit as st

from ..run.slots import Slots


def place_text(slots: Slots, what: str, ahead: int) -> str:
    """The note for a run waiting with ``ahead`` runs before it in ``slots``' queue."""
    running, _ = slots.state()
    where = "you are next" if ahead == 0 else f"{ahead} run{'s' if ahead != 1 else ''} ahead of you"
    return (f"Waiting for a {what} slot: {where}. This server runs {slots.capacity} at a time "
            f"({running} running now); yours starts by itself, keep this page open.")


@contextmanager
def queued(slots: Slots, what: str, box=None) -> Iterator[bool]:
    """Hold a slot of ``slots`` for the ``with`` block, showing the place in the queue while waiting (in ``box``,
    an ``st.empty()`` placed where the user looks, else here). Yields whether it had to wait."""
    box = box if box is not None else st.empty()
    def show(ahead: int) -> None:
        box.info(place_text(slots, what, ahead), icon=":material/hourglass_top:")

    with slots.hold(on_wait=show) as waited:
        box.empty()
        yield waited
