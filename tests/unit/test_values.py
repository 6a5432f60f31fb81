"""jeanzay_kit/values.py: what a config or JSON value narrows to."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jeanzay_kit.values import as_node, flag, integer, items, real, strings, text, whole


@pytest.mark.parametrize(
    ("value", "node"),
    [({"a": 1}, {"a": 1}), (None, {}), ("x", {}), ([("a", 1)], {}), (3, {})],
)
def test_as_node(value: object, node: object) -> None:
    assert as_node(value) == node


@pytest.mark.parametrize(
    ("value", "expected"),
    [(["a", "b"], ("a", "b")), (("a",), ("a",)), ("ab", ()), (["a", 1], ()), (None, ())],
)
def test_strings(value: object, expected: tuple[str, ...]) -> None:
    assert strings(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), (0, 0), (True, -1), ("3", -1), (2.0, -1), (None, -1)]
)
def test_integer_is_a_whole_number_and_never_a_bool(value: object, expected: int) -> None:
    assert integer(value, -1) == expected


@pytest.mark.parametrize(("value", "expected"), [([1, "a"], [1, "a"]), ((1,), [1]), ("ab", [])])
def test_items(value: object, expected: list[object]) -> None:
    assert items(value) == expected


@pytest.mark.parametrize(
    ("read", "good", "expected", "bad"),
    [
        (whole, 3, 3, [True, "3", 3.0, None]),
        (real, 2, 2.0, [False, "2.0", None]),
        (real, 2.5, 2.5, [[2.5]]),
        (text, "n1", "n1", [1, None, b"n1"]),
        (flag, False, False, [0, "true", None]),
    ],
)
def test_a_record_value_of_the_wrong_type_is_a_type_error(
    read: Callable[[object], object], good: object, expected: object, bad: list[object]
) -> None:
    assert read(good) == expected and type(read(good)) is type(expected)
    for value in bad:
        with pytest.raises(TypeError, match="is not"):
            read(value)
