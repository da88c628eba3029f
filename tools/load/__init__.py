"""The load test: ``python -m tools.load`` (issue 19). Simulated students against a gptviz server, speaking
Streamlit's own websocket protocol (``BackMsg`` / ``ForwardMsg`` from the ``streamlit`` package): neither AppTest
nor a browser, so one core drives many sessions.

Each student opens a page (default: Attention), then for ``--seconds`` from that first view, every ``--every``
seconds (jittered ±50 %), edits the sidebar text (a new text each time, so the server's trace cache misses, unless
``--same-texts``) or switches the sidebar's layer or head; ``--trainers K`` of them first press *Start training*
on the Training page (and then go to the page). It reports the time
from a change being sent to that run's ``script_finished`` (p50, p95, max), the first-view time (connect to the
first run's end), every error the server showed (exceptions, ``st.error``, compilation errors), the server's peak
resident memory, this client's own CPU time, and the model the sidebar named (which must be the app's default
model). ``--json FILE`` writes the same. Exit status 0 when every student got a view, every change finished and
there was no error; else 1; 2 when the server it was to start did not start.

Without ``--url`` it starts ``streamlit run app.py`` on a free 127.0.0.1 port (``tools.bench.server``) and stops
it at the end. As a library: ``run_class(url, students=…, seconds=…, every=…, trainers=…, page=…) -> dict``.

One module per job: ``protocol`` (one websocket session: requests, replies, cached messages), ``widgets`` (the
widgets' ids and values, the ``WidgetStates`` sent), ``reading`` (errors and the model caption in a run; the
expected model), ``student`` (one student's behaviour), ``memory`` (the server's memory from /proc), ``machine``
(CPU time of the server, this client and every other process), ``classroom`` (``run_class``), ``report``
(figures, verdict, table), ``cli``.
"""
from tools.load.classroom import run_class

__all__ = ["run_class"]
