"""schedule/__init__.py exports its names lazily (so `corgi plan --help` lists the modes without numpy) and
names them again under TYPE_CHECKING for editors and type checkers: the two lists must be the same."""
from __future__ import annotations

import ast
import inspect

import corgi_io.schedule


def type_checking_imports() -> dict:
    """Public name -> module of the imports under ``if TYPE_CHECKING:`` in schedule/__init__.py."""
    tree = ast.parse(inspect.getsource(corgi_io.schedule))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.name: node.module.rsplit(".", 1)[1] for node in block.body for alias in node.names}


def test_the_type_checking_imports_are_the_lazy_exports():
    assert type_checking_imports() == corgi_io.schedule._EXPORTS
    assert sorted(corgi_io.schedule.__all__) == sorted(corgi_io.schedule._EXPORTS)


def test_every_export_resolves_to_its_modules_object():
    for name, module in corgi_io.schedule._EXPORTS.items():
        assert getattr(corgi_io.schedule, name) is getattr(__import__(f"corgi_io.schedule.{module}",
                                                                      fromlist=[name]), name)
