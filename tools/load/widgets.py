"""The page's widgets as the frontend keeps them: their ids, labels and current values, and the ``WidgetStates``
a rerun request carries.

After each run the client learns every widget the run drew (from its ``new_element`` deltas): its value is the
one the student chose, unless the server set one since (``set_value``); else the value it had in the last run;
else, for a widget new on the page, its default. Widgets the run
did not draw are forgotten (the frontend does the same). A button's press is a trigger: it is sent once.
Widget kinds not modelled here are left out of the request; the server then keeps their last value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamlit.proto.WidgetStates_pb2 import WidgetStates

MODELLED = {"text_area", "text_input", "selectbox", "radio", "checkbox", "number_input", "slider", "button_group"}
BUTTONS = {"button", "download_button"}


@dataclass
class Widget:
    """One widget the last run drew."""

    id: str
    kind: str  # the Element field: text_area, selectbox, ...
    label: str
    form_id: str
    options: list[str]
    value_type: str  # the WidgetState field its value goes in ("" for a button)
    value: Any  # None: no value to send

    @property
    def key(self) -> str:
        """The user key the id ends with (Streamlit's ids are ``$$ID-<hash>-<key>``), or ""."""
        head, _, tail = self.id.rpartition("-")
        return tail if head.startswith("$$ID") else ""


def _server_value(kind: str, w) -> tuple[str, Any]:
    """(the WidgetState field, the value the server says the widget has) for one widget proto."""
    if kind in ("text_area", "text_input"):
        if w.set_value and w.HasField("value"):
            return "string_value", w.value
        return "string_value", w.default if w.HasField("default") else None
    if kind in ("selectbox", "radio"):
        if w.set_value and w.HasField("raw_value"):
            return "string_value", w.raw_value
        ok = w.HasField("default") and 0 <= w.default < len(w.options)
        return "string_value", w.options[w.default] if ok else None
    if kind == "checkbox":
        return "bool_value", w.value if w.set_value else w.default
    if kind == "number_input":
        field = "int_value" if w.data_type == w.INT else "double_value"
        v = w.value if w.set_value and w.HasField("value") else (w.default if w.HasField("default") else None)
        return field, None if v is None else (int(v) if field == "int_value" else float(v))
    if kind == "slider":
        if w.type != w.SLIDER:  # a select_slider sends its own kind of value: not modelled
            return "", None
        return "double_array_value", list(w.value if w.set_value else w.default)
    if kind == "button_group":
        return "string_array_value", list(w.raw_values) if w.set_value else None
    return "", None


class WidgetBook:
    """The widgets of the page shown now and the values a rerun request sends for them."""

    def __init__(self):
        self.widgets: dict[str, Widget] = {}
        self.chosen: dict[str, Any] = {}  # values the student set, by widget id
        self.triggers: set[str] = set()  # buttons pressed since the last request
        self.skipped_kinds: set[str] = set()

    def learn(self, elements, *, whole_page: bool = True) -> None:
        """Take in the widgets one run drew (``elements``: (delta path, Element) pairs). ``whole_page``: the run
        drew the whole page (not a fragment), so widgets it did not draw are gone."""
        seen: dict[str, Widget] = {}
        for _, el in elements:
            kind = el.WhichOneof("type")
            if kind in BUTTONS:
                b = getattr(el, kind)
                seen[b.id] = Widget(b.id, kind, b.label, b.form_id, [], "", None)
                continue
            if kind not in MODELLED:
                continue
            w = getattr(el, kind)
            value_type, value = _server_value(kind, w)
            if not value_type:
                self.skipped_kinds.add(kind)
                continue
            options = [o.content for o in w.options] if kind == "button_group" else list(getattr(w, "options", []))
            if w.set_value:
                self.chosen.pop(w.id, None)  # the server set the value: it wins over the student's older choice
            elif w.id in self.widgets:
                value = self.widgets[w.id].value  # a widget drawn again keeps its value; a default is for new ones
            seen[w.id] = Widget(w.id, kind, w.label, w.form_id, options, value_type, value)
        if whole_page:
            self.widgets = seen
            self.chosen = {k: v for k, v in self.chosen.items() if k in seen}
        else:
            self.widgets.update(seen)

    def find(self, kind: str | None = None, *, label: str | None = None, key: str | None = None) -> Widget:
        """The one widget of this kind with this label (or user key); KeyError naming what there is if none."""
        hits = [w for w in self.widgets.values() if (kind is None or w.kind == kind)
                and (label is None or w.label == label) and (key is None or w.key == key)]
        if not hits:
            have = sorted(f"{w.kind} {w.label!r}" for w in self.widgets.values())
            raise KeyError(f"no {kind or 'widget'} labelled {label!r} (key {key!r}) on the page; it has: {have}")
        return hits[0]

    def value(self, widget_id: str) -> Any:
        return self.chosen.get(widget_id, self.widgets[widget_id].value)

    def set(self, widget_id: str, value: Any) -> None:
        self.chosen[widget_id] = value

    def press(self, widget_id: str) -> None:
        self.triggers.add(widget_id)

    def states(self) -> WidgetStates:
        """Every known widget's current value, and the buttons pressed (sent once, then released)."""
        out = WidgetStates()
        for w in self.widgets.values():
            if w.value_type:
                v = self.value(w.id)
                if v is None:
                    continue
                ws = out.widgets.add()
                ws.id = w.id
                if w.value_type in ("double_array_value", "string_array_value"):
                    getattr(ws, w.value_type).data.extend(v)
                else:
                    setattr(ws, w.value_type, v)
        for wid in sorted(self.triggers):
            ws = out.widgets.add()
            ws.id = wid
            ws.trigger_value = True
        self.triggers.clear()
        return out
