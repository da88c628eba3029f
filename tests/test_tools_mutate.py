"""tools.mutate's --functions: the patterns it hands mutmut match exactly the named functions' mutants, as mutmut
itself names them (its own ``mangle_function_name``), and no other function's."""
from fnmatch import fnmatch

import pytest

from tools.mutate import function_name, mutant_patterns

mutmut_names = pytest.importorskip("mutmut.mutation.trampoline_templates")


def mutmut_key(module: str, name: str, cls: str | None, n: int) -> str:
    """A mutant's name as mutmut 3.8 writes it: the dotted module, its mangled function name and a number."""
    return f"{module}.{mutmut_names.mangle_function_name(name=name, class_name=cls)}__mutmut_{n}"


FUNCTIONS = [("decompose", None), ("_unembed", None), ("compute", "Contributions"), ("decompose_all", None),
             ("compute", "Other"), ("compute_all", "Contributions"), ("x", None)]


@pytest.mark.parametrize("asked", [["decompose"], ["Contributions.compute"], ["decompose", "Contributions.compute"],
                                   ["_unembed"]])
def test_the_patterns_match_the_named_functions_mutants_and_no_others(asked):
    keys = [mutmut_key("gptviz.interp.lens", n, c, i) for n, c in FUNCTIONS for i in (1, 12)]
    patterns = mutant_patterns(asked)
    matched = {k for k in keys if any(fnmatch(k, p) for p in patterns)}
    wanted = {k for k in keys if function_name(k) in asked}
    assert matched == wanted
    assert len(wanted) == 2 * len(asked)  # each asked name is one function of the list, both of its mutants


def test_function_name_reads_mutmuts_names_back():
    assert function_name(mutmut_key("gptviz.a.b", "compute", "Contributions", 3)) == "Contributions.compute"
    assert function_name(mutmut_key("gptviz.a.b", "_unembed", None, 10)) == "_unembed"


@pytest.mark.parametrize("bad", ["a.b.c", "compute()", "x-y", ""])
def test_a_malformed_function_name_says_how_to_write_one(bad):
    with pytest.raises(SystemExit, match="decompose or Contributions.compute"):
        mutant_patterns([bad])
