"""The class's figures from the students' logs: percentiles, errors, the model check, the verdict, and the table.

``summarise`` turns the logs into one dict (what ``run_class`` returns and ``--json`` writes); ``table`` prints
it; ``exit_status`` is 0 when the run is clean (every student got a view, every change finished, no error, the
expected model shown), else 1.
"""
from __future__ import annotations

from collections import Counter

from tools.load.student import StudentLog


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation between the sorted values; None for no values."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def spread(values: list[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 0.5), "p95": percentile(values, 0.95),
            "max": max(values) if values else None}


def _distinct(texts: list[str]) -> dict:
    counts = Counter(t[:300] for t in texts)
    return {"count": len(texts), "distinct": dict(counts.most_common())}


def summarise(logs: list[StudentLog], *, settings: dict, expected_model: str | None, memory: dict,
              cpu: dict) -> dict:
    """One dict with every figure of the run, and ``ok`` / ``failures``."""
    changes = [c for log in logs for c in log.changes]
    finished = [c["seconds"] for c in changes if c["seconds"] is not None]
    views = [log.first_view_s for log in logs if log.first_view_s is not None]
    errors = [e for log in logs for e in log.errors]
    checked = sorted({m for log in logs for m, is_checked in log.models if is_checked})
    out = {
        **settings,
        "model": {"expected": expected_model, "shown": checked,
                  "after_training": sorted({m for log in logs for m, c in log.models if not c}),
                  "ok": expected_model is None or checked == [expected_model]},
        "first_view_s": spread(views),
        "students_with_a_view": len(views),
        "change_s": spread(finished),
        "changes_sent": len(changes),
        "changes_finished": len(finished),
        "changes_by_kind": dict(Counter(c["kind"] for c in changes)),
        "late_changes": sum(c["late"] for c in changes),
        "training_s": [log.training["seconds"] for log in logs if log.training],
        "training_status": [log.training["status"] for log in logs if log.training],
        "training_steps": [log.training.get("steps") for log in logs if log.training],
        "errors": _distinct(errors),
        "errors_by_student": {log.index: len(log.errors) for log in logs if log.errors},
        "warnings": _distinct([w for log in logs for w in log.warnings]),
        "server_memory": memory,
        "client_cpu_s": cpu["client_cpu_s"],
        "wall_s": cpu["wall_s"],
        "client_cpu_share": cpu["client_cpu_s"] / cpu["wall_s"] if cpu["wall_s"] else None,
        "cpu": cpu,
        "protocol": {"messages": sum(log.messages for log in logs), "mib": sum(log.bytes for log in logs) / 2**20,
                     "refs_resolved": sum(log.refs_resolved for log in logs)},
    }
    failures = []
    if len(views) < len(logs):
        failures.append(f"{len(logs) - len(views)} of {len(logs)} students never got a first view")
    if len(finished) != len(changes):
        failures.append(f"{len(changes) - len(finished)} of {len(changes)} changes never finished")
    if errors:
        failures.append(f"{len(errors)} error(s) from the server or the protocol")
    if not out["model"]["ok"]:
        failures.append(f"the page showed {checked or 'no model caption'}, not the expected {expected_model!r}")
    if any(s != "FINISHED_SUCCESSFULLY" for s in out["training_status"]):
        failures.append(f"training runs ended: {out['training_status']}")
    out["failures"] = failures
    out["ok"] = not failures
    return out


def exit_status(result: dict) -> int:
    return 0 if result["ok"] else 1


def _s(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def table(r: dict) -> str:
    """The run as a plain-text table."""
    mem, c = r["server_memory"], r["cpu"]
    rows = [
        ("students · trainers", f"{r['students']} · {r['trainers']}"),
        ("seconds · change every · ramp", f"{r['seconds']:g} s · {r['every']:g} s (±50 %) · {r['ramp']:g} s"),
        ("page", r["page"]),
        ("model shown", "; ".join(r["model"]["shown"]) or "(none)"),
        ("model expected", f"{r['model']['expected']}  [{'OK' if r['model']['ok'] else 'WRONG'}]"),
        ("model after training", "; ".join(r["model"]["after_training"]) or "—"),
        ("first view p50 / p95 / max", " / ".join(_s(r["first_view_s"][k]) for k in ("p50", "p95", "max")) +
         f" s  ({r['students_with_a_view']} of {r['students']} students)"),
        ("change → finished p50 / p95 / max", " / ".join(_s(r["change_s"][k]) for k in ("p50", "p95", "max")) + " s"),
        ("changes sent / finished / late", f"{r['changes_sent']} / {r['changes_finished']} / {r['late_changes']}  "
                                           f"{r['changes_by_kind']}"),
        ("training runs (s)", ", ".join(_s(t) for t in r["training_s"]) or "—"),
        ("errors", f"{r['errors']['count']} ({len(r['errors']['distinct'])} distinct)"),
        ("warnings", f"{r['warnings']['count']} ({len(r['warnings']['distinct'])} distinct)"),
        ("server RSS start / peak / end", f"{mem.get('rss_start_mib', 0):.0f} / {mem.get('rss_peak_mib', 0):.0f} / "
                                          f"{mem.get('rss_end_mib', 0):.0f} MiB (VmHWM {mem.get('vmhwm_mib', 0):.0f} "
                                          f"MiB, pid {mem.get('server_pid')})"),
        ("client CPU / wall", f"{r['client_cpu_s']:.1f} s / {r['wall_s']:.1f} s ({r['client_cpu_share']:.0%} of one "
                              "core)"),
        ("CPU s: server / others / machine", f"{_s(c['server_cpu_s'])} / {_s(c['other_processes_cpu_s'])} / "
                                             f"{_s(c['machine_busy_cpu_s'])} of {c['cores'] * r['wall_s']:.0f} "
                                             f"({c['cores']} cores); load avg {c['load_average_start']:.1f} → "
                                             f"{c['load_average_end']:.1f}; taken by the host (steal) "
                                             f"{_s(c.get('steal_cpu_s'))}"),
        ("messages · MiB · by reference", f"{r['protocol']['messages']} · {r['protocol']['mib']:.1f} · "
                                          f"{r['protocol']['refs_resolved']}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    for title, key in (("error", "errors"), ("warning", "warnings")):
        for text, n in r[key]["distinct"].items():
            lines.append(f"  {title} ×{n}: {text}")
    lines.append("RESULT: OK" if r["ok"] else "RESULT: FAIL — " + "; ".join(r["failures"]))
    return "\n".join(lines)
