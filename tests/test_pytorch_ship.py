"""tpviz.pytorch.ship: a class written in a notebook (module ``__main__``, no file) is sent by
its code and made again, methods, super(), static methods and the globals they read included;
what cannot travel is refused with a reason."""

import pickle

import pytest

from tpviz.errors import ArgumentTypeError
from tpviz.pytorch import ship

NOTEBOOK_CELL = '''
import math
SCALE = 3

class Base:
    def __init__(self, k):
        self.k = k

class Mine(Base):
    def __init__(self, k):
        super().__init__(k + 1)

    def area(self):
        return math.pi * self.k ** 2 * SCALE

    @staticmethod
    def twice(x):
        def inner(y):  # a function made while the method runs
            return 2 * y
        return inner(x)
'''


def notebook_class():
    space = {"__name__": "__main__"}
    exec(compile(NOTEBOOK_CELL, "<cell>", "exec"), space)
    return space["Mine"]


def test_a_notebook_class_cannot_be_pickled_by_reference_but_is_shipped():
    cls = notebook_class()
    assert not ship.importable(cls)
    made = ship.unpack(pickle.loads(pickle.dumps(ship.pack(cls))))
    assert made is not cls and made.__name__ == "Mine"
    obj = made(2)  # super().__init__(k + 1): k = 3
    assert obj.k == 3
    assert obj.area() == pytest.approx(3.141592653589793 * 9 * 3)
    assert made.twice(5) == 10
    assert issubclass(made, made.__bases__[0]) and made.__bases__[0].__name__ == "Base"


def test_a_plan_keeps_library_styles_and_ships_the_others():
    cls = notebook_class()
    plan = {"a": cls(1), "b": 7}
    packed = ship.pack_plan(plan)
    assert packed["b"] == 7 and packed["a"][0] == ship.TAG
    back = ship.unpack_plan(pickle.loads(pickle.dumps(packed)))
    assert back["a"].k == 2 and back["a"].area() == pytest.approx(3.141592653589793 * 4 * 3)


def test_a_method_closing_over_a_local_variable_is_refused():
    n = 4

    class Local:
        def f(self):
            return n

    with pytest.raises(ArgumentTypeError, match="variables of the function it was defined in"):
        ship.pack(Local)


HELPER_CELL = '''
import math
SCALE = 3

def area(k):  # a helper at the notebook's top level, which a worker cannot import
    return math.pi * k ** 2 * SCALE

def twice_area(k):
    return 2 * area(k)

class Uses:
    def f(self, k):
        return twice_area(k)
'''


def test_a_helper_function_written_in_the_notebook_travels_with_the_class():
    """Review 13.4: a right style whose ``_apply`` calls a helper defined at the notebook's top
    level failed in the workers with "Can't get attribute ... on <module '__main__'>"."""
    space = {"__name__": "__main__"}
    exec(compile(HELPER_CELL, "<cell>", "exec"), space)
    blob = ship.pack(space["Uses"])
    assert b"twice_area" in blob
    for name in ("area", "twice_area"):
        del space[name]  # the worker has neither
    made = ship.unpack(pickle.loads(pickle.dumps(blob)))
    assert made().f(2) == pytest.approx(2 * 3.141592653589793 * 4 * 3)


def test_an_attribute_that_cannot_be_pickled_is_refused_with_its_name():
    space = {"__name__": "__main__"}
    exec("class P:\n    @property\n    def dim(self):\n        return 0\n", space)
    with pytest.raises(ArgumentTypeError, match=r"P\.dim cannot be sent .*plain method"):
        ship.pack(space["P"])
