"""Layer 6, presentation: what each step means, tensor-to-matrix slicing, readouts, the page context, lessons,
the HTML report and the figures. No Streamlit.

Imports only the layers below it.
"""
