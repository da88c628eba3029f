"""Every Hugging Face family gptviz opens, by ``model_type``: the dense ones (``hf_families``) and the mixtures of
experts (``hf_moe``), which build on them."""
from __future__ import annotations

from .hf_families import FAMILIES as DENSE_FAMILIES
from .hf_families import Family
from .hf_moe import MOE_FAMILIES

FAMILIES: dict[str, Family] = {**DENSE_FAMILIES, **MOE_FAMILIES}
