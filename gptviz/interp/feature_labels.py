"""Words for a transcoder's features, made from what ships with it: a short label for every feature ("fires on 'ell',
'ag' · promotes 'e', 's'") and its strongest held-out snippets cut to about 30 characters around the peak. The
Circuits page shows both when a feature node of the attribution graph is hovered.

"Fires on": the tokens at the peaks of the feature's strongest held-out windows (the snippet file beside the
transcoder, ``gptviz.interp.transcoder.load_snippets``: per layer ``gptviz.training.sae.top_snippets``'s ``ids``,
``acts``, ``peak``, ``where``, ``density``), strongest first, each once. "Promotes": the tokens whose logits its
decoder raises most, its write to the last MLP output it reaches read through the final norm and the unembedding as
``sae.direction_logits`` reads an SAE feature's direction (what it pushes for directly if nothing after it changed
it). Text comes back plain: whoever draws it escapes it.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import torch

from .sae import direction_logits

N_FIRES = 3  # peak tokens named in a label
N_PROMOTES = 3  # promoted tokens named in a label
N_SNIPPETS = 2  # snippets per feature: the hover shows them, each ~45 bytes more per feature node in the chart
SNIPPET_CHARS = 30  # about this many characters of text per snippet, the peak token's included
AFTER_CHARS = 8  # of them, at most this many after the peak token

Window = tuple[str, str, str]  # (text before the peak token, the peak token, text after it)


def promoted(model, tc, n: int = N_PROMOTES) -> list[np.ndarray]:
    """Per layer, ``(n_features, n)``: for each feature, the ids of the ``n`` tokens its decoder to the last MLP
    output it writes promotes most (``direction_logits`` of that row), the most promoted first."""
    with torch.no_grad():
        # direction_logits is linear in the direction: read once per unit vector, then every row of every layer
        unit = torch.stack([direction_logits(model, e) for e in torch.eye(tc.d_model)], 1)  # (V, d_model)
        out = []
        for layer in range(tc.n_layer):
            rows = torch.stack([tc.decoder_row(layer, f)[-1] for f in range(tc.n_features)]).float()
            out.append((rows @ unit.T).topk(min(n, unit.shape[0]), dim=1).indices.numpy())
        return out


def _span(sn: Mapping[str, np.ndarray], feat: int, j: int) -> tuple[list[int], list[float]]:
    """Snippet ``j`` of feature ``feat``: its token ids (the -1 padding left out) and the activation on each."""
    ids = [t for t in np.asarray(sn["ids"][feat, j]).tolist() if t >= 0]
    return ids, np.asarray(sn["acts"][feat, j, :len(ids)], dtype=np.float32).tolist()


def _peak(acts: Sequence[float]) -> int:
    """Where ``acts`` is largest (the first such place)."""
    return max(range(len(acts)), key=acts.__getitem__)


def _live(sn: Mapping[str, np.ndarray], feat: int) -> list[int]:
    """The indices of feature ``feat``'s snippets that fire (strongest first, as stored)."""
    out = []
    for j, v in enumerate(np.asarray(sn["peak"][feat]).tolist()):
        if not v > 0:
            break
        out.append(j)
    return out


def fires_on(sn: Mapping[str, np.ndarray], feat: int, vocab: Sequence[str], n: int = N_FIRES) -> list[str]:
    """The tokens (as ``vocab`` shows them) at the peaks of feature ``feat``'s strongest snippets, strongest first,
    each once, at most ``n``; empty for a feature that never fires."""
    out: list[str] = []
    for j in _live(sn, feat):
        ids, acts = _span(sn, feat, j)
        if not ids:
            continue
        t = ids[_peak(acts)]
        word = vocab[t] if 0 <= t < len(vocab) else "?"
        if word not in out:
            out.append(word)
        if len(out) == n:
            break
    return out


def window(ids: Sequence[int], acts: Sequence[float], texts: Sequence[str], chars: int = SNIPPET_CHARS,
           after: int = AFTER_CHARS) -> Optional[Window]:
    """(before, peak, after): the token where ``acts`` is largest and the text around it, about ``chars``
    characters in all with at most ``after`` after it; "…" where text was cut. ``texts``: each token id's text.
    None for an empty span."""
    ids = [int(t) for t in ids]
    if not ids:
        return None
    p = _peak([float(a) for a in acts][:len(ids)])

    def text(part: Sequence[int]) -> str:
        return "".join(texts[t] if 0 <= t < len(texts) else "?" for t in part)

    peak, head, tail = text(ids[p:p + 1]), text(ids[:p]), text(ids[p + 1:])
    tail_cut = tail[:after]
    room = max(0, chars - len(peak) - len(tail_cut))
    head_cut = head[len(head) - room:] if room else ""
    return (("…" if len(head_cut) < len(head) else "") + head_cut, peak,
            tail_cut + ("…" if len(tail_cut) < len(tail) else ""))


def snippets(sn: Mapping[str, np.ndarray], feat: int, texts: Sequence[str], n: int = N_SNIPPETS,
             chars: int = SNIPPET_CHARS) -> list[Window]:
    """Feature ``feat``'s ``n`` strongest snippets as ``window``s, strongest first (fewer if it fires in fewer)."""
    out = []
    for j in _live(sn, feat)[:n]:
        w = window(*_span(sn, feat, j), texts, chars)
        if w is not None:
            out.append(w)
    return out


def label(fires: Sequence[str], promotes: Sequence[str]) -> str:
    """"fires on 'a', 'b' · promotes 'c', 'd'" (either half left out when it has no tokens)."""
    parts = [f"fires on {', '.join(repr_token(t) for t in fires)}" if fires else "",
             f"promotes {', '.join(repr_token(t) for t in promotes)}" if len(promotes) else ""]
    return " · ".join(p for p in parts if p)


def repr_token(token: str) -> str:
    """A token in quotes, on one line."""
    return "'" + str(token).replace("\r", "").replace("\n", "↵") + "'"


def feature_labels(n_features: int, vocab: Sequence[str], promoted_ids: Sequence[np.ndarray],
                   per_layer: Optional[Sequence[Mapping[str, np.ndarray]]] = None) -> dict[tuple[int, int], str]:
    """(layer, feature) -> its label, for every feature of every layer of ``promoted_ids`` (one ``promoted`` array
    per layer); "fires on" from ``per_layer``'s snippets where given ("never fires on the held-out text" where a
    feature has none)."""
    out = {}
    for layer, up in enumerate(promoted_ids):
        sn = per_layer[layer] if per_layer is not None else None
        for f, top in enumerate(np.asarray(up).tolist()[:n_features]):
            promotes = [vocab[t] if 0 <= t < len(vocab) else "?" for t in top]
            fires = fires_on(sn, f, vocab) if sn is not None else []
            dead = "never fires on the held-out text" if sn is not None and not fires else ""
            out[layer, f] = " · ".join(p for p in (dead, label(fires, promotes)) if p)
    return out


def feature_snippets(per_layer: Sequence[Mapping[str, np.ndarray]], texts: Sequence[str], n: int = N_SNIPPETS,
                     chars: int = SNIPPET_CHARS) -> dict[tuple[int, int], list[Window]]:
    """(layer, feature) -> its ``snippets``, for every feature that fires on the held-out text."""
    out = {}
    for layer, sn in enumerate(per_layer):
        for f in range(sn["peak"].shape[0]):
            got = snippets(sn, f, texts, n, chars)
            if got:
                out[layer, f] = got
    return out
