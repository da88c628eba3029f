"""The benchmark: ``python -m tools.bench``.

Every row names the model it measured (its parameter count, the positions T it read, the tokenizer), and
every figure is set against a baseline measured in the same run, because these machines are noisy:

1. **trace** — ``trace()`` with targets (as the app traces) ÷ a plain forward with targets, same model and
   tokens, interleaved repeats.
2. **pages** — a page's script time after one change, in AppTest, in two separate rows per page:
   a *view change* (a sidebar display option: the trace comes from the cache) and a *text change* (a new text:
   a new trace). Each row says how many reruns were cache hits and misses. After **every** run the bench
   checks that there was no exception, no ``st.error`` and no ``st.warning``, and that the sidebar shows the
   model the row names (``vocab_size = V … · P parameters``). A page that fails or falls back to another model
   makes its row FAIL with the reason, and no time is reported for it. GPT-2-small rows use the preset
   ``gpt2-small`` with the GPT-2 tokenizer (124,439,808 parameters) on texts cut to exactly ``CLASSIC_T`` = 64
   tokens (tools/bench/models.py; T = 512 is the long part's): a GPT-2-small row FAILS unless one of its page's
   traces is of that model at that T. The Lessons rows open lesson 2's first step
   (``?lesson=02_one_attention_head&lstep=1``: it reads the sidebar's model and text, where lesson 1 pins the
   char-bpe tokenizer). Spread: ``p95`` when there are at least 20 samples, else ``max of N``. ``--pages
   lessons,home`` runs only those pages' rows.
2b. **circuits** — the Circuits page on the Shakespeare GPT with its cross-layer transcoder
   (tools/bench/circuits.py): a new 64-token line (a new graph, cache miss, goal p95 ≤ 3 s) and a node-threshold
   change (cache hit, goal p95 ≤ 1 s), 20 of each, in AppTest; then both in headless Chromium against
   ``streamlit run app.py`` (a text edit to the graph drawn, and an arrow key on the node-threshold slider to the
   graph redrawn).
3. **memory** — one GPT-2-small trace with targets at the app's token cap, in a fresh process: the weights'
   own size (``num_params × 4`` bytes) and the process's resident memory are reported separately from the
   peak the trace adds (and the peak a plain forward adds). MiB = 2^20 bytes.
4. **training** — steps per second of the training loop alone (timed from the first step to the last,
   without the evaluations, snapshots and copies around it), and of the whole ``train()`` call, both ÷ plain
   forward passes per second.
5. **browser** — in headless Chromium, against ``streamlit run app.py`` started here: the time from a text
   edit (typed into the sidebar text area, committed with Ctrl+Enter) to the page fully redrawn (the
   script's ``script_finished`` message has arrived, nothing is stale, the status widget is gone, every
   visible Plotly chart has drawn its SVG, and the page has not changed for a quiet second; the time is that
   of the last change). Median of at least 7 edits per page, for Home, Attention, Logits and Step-through,
   each ÷ the same figure for a one-chart Streamlit app measured in the same run (in turns with the pages).
   Page addresses are read from the app's sidebar navigation.

6. **class** — simulated students over Streamlit's websocket protocol (``tools.load.run_class``) against one
   ``streamlit run app.py`` started here and warmed as a teacher would (one student opens the page once): 60
   students changing the Attention page every 5 s for 60 s (p95 change→finished ≤ 1 s, 0 errors, peak RSS ≤
   2 GB); 30 students opening it at once (every first view ≤ 3 s); the largest class at p95 ≤ 1 s (30-s runs at
   30, 45, 60, 75, 90 students until one goes over); 30 students of whom 5 start training (p95 ≤ 2 s). Each row
   names its students, seconds, interval, page, model, warm or cold, and the CPU seconds of the server and of
   the machine's other processes (its goals are absolute seconds, not ratios: no baseline). It takes 5-15
   minutes (a trainer waits up to 10 minutes for its run), so it is **not** run by default: only with
   ``--only class`` (or ``class`` in an ``--only`` list).

7. **long** — every page after a text change at T = 512 (a line of exactly 512 tokens), for GPT-2 small and a
   SmolLM2-135M-shaped model folder built here with ``transformers`` (random weights), and the memory of one such
   trace with and without gradients, in a fresh process (``tools/bench/long_texts.py``; goals: ≤ 3 s a page, ≤ 6 s
   Backward, ≤ 1.5 GiB a trace). 10-30 minutes, so only with ``--only long``; ``python -m tools.bench.long_texts
   --pages home,attention --reps 3`` runs a few pages.

8. **families** (issue 38) — every page after a text change at T = 256 for a Qwen3-0.6B-shaped model folder
   (596,049,920 parameters, random weights, built here with ``transformers``; 20 text changes a page, goal p95 ≤ 3 s
   on every page, Backward too) and one trace's memory, then every page's view and text change on the shipped
   mixture of experts (shakespeare-moe, 8 experts, top 2): typed sentences as in part 2 (goal 300 ms), and lines as
   long as its context, 128 tokens (the long texts' goal, 3 s). About 35 minutes, so only with ``--only families``.

``--quick`` runs fewer repeats (a smoke check; shorter class runs).
``--only trace,pages,circuits,memory,training,browser`` (the default) picks parts, ``class`` among them when
named; ``--browser-only`` and ``--no-browser`` are shorthands. Exit status: 0 when every row met its goal, 1 when a
goal was missed, 2 when a row FAILED (an error, a fallback, the wrong model): its reason is printed.

One module per job: ``report`` (goals, rows, the table), ``models`` (the model each row names, the texts it
reads), ``engine`` (1), ``pages`` (2), ``circuits`` (2b), ``memory`` (3), ``training`` (4), ``server``,
``browser_tab`` and ``browser`` (5), ``classroom`` (6), ``long_texts`` (7), ``cli`` (the command line).
Importing the package imports neither Streamlit nor Playwright: only the functions that drive them do.
"""
from tools.bench.cli import main

__all__ = ["main"]
