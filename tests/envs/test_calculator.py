"""The calculator tool: exact values worked by hand, every error message, and the abuse limits."""
from fractions import Fraction

import pytest

from rlvr.envs import calculator as calc
from rlvr.envs.calculator import MAX_DIGITS, calculator, format_number
from rlvr.envs.tools import Tool, ToolError


@pytest.mark.parametrize("expression, value", [
    ("23*47", "1081"),
    ("2**10", "1024"),
    ("7/2", "3.5"),
    ("1/3", "1/3"),
    ("-(3+4)*2", "-14"),
    ("10//3", "3"),
    ("10%3", "1"),
    ("2**3**2", "512"),            # right-associative: 2**9, not 8**2 = 64
    ("2^3", "8"),
    ("2^3^2", "512"),
    ("2+3*4", "14"),               # * before +
    ("(2+3)*4", "20"),
    ("10-4-3", "3"),               # left-associative: (10-4)-3, not 10-1
    ("64/4/2", "8"),               # (64/4)/2 = 8, not 64/2 = 32
    ("-2**2", "-4"),               # ** binds tighter than unary minus, as in Python
    ("(-2)**2", "4"),
    ("2**-2", "0.25"),
    ("+5--3", "8"),
    ("-7//2", "-4"),               # floor, not truncation
    ("-7%3", "2"),                 # the divisor's sign
    ("7.5//2", "3"),
    ("0.1+0.2", "0.3"),            # exact, not 0.30000000000000004
    ("1.5*2", "3"),
    (".5+5.", "5.5"),
    ("-1/4", "-0.25"),
    ("(1/3)**2", "1/9"),
    ("2**-64*2**60", "0.0625"),    # 1/16
    ("1/1024", "0.0009765625"),    # 10 places: within MAX_DECIMALS
    (" 3 \t*\n 4 ", "12"),
    ("007", "7"),
    ("0**0", "1"),
])
def test_values(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize("value, text", [
    (Fraction(391), "391"),
    (Fraction(-3, 2), "-1.5"),
    (Fraction(3, 20), "0.15"),                       # 20 = 2**2 * 5: two places
    (Fraction(1, 2 ** 20), "0.00000095367431640625"),  # exactly 20 places
    (Fraction(1, 2 ** 21), "1/2097152"),             # 21 places: over MAX_DECIMALS
    (Fraction(2, 3), "2/3"),
    (Fraction(-1, 6), "-1/6"),
    (Fraction(0), "0"),
])
def test_format_number(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize("expression, message", [
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("1/0", "division by zero"),
    ("1//0", "division by zero"),
    ("1%(2-2)", "division by zero"),
    ("0**-1", "division by zero"),
    ("2+", "unexpected end of expression"),
    ("(1+2))", "unexpected ')' at position 6"),
    ("()", "unexpected ')' at position 2"),
    ("*3", "unexpected '*' at position 1"),
    ("2(3)", "unexpected '(' at position 2"),       # no implicit multiplication
    ("2 3", "unexpected number 3 at position 3"),
    ("(1+2", "missing ')' for the '(' at position 1"),
    ("2*(3", "missing ')' for the '(' at position 3"),
    ("1,000", "unexpected ',' at position 2: commas are not allowed (write 1000, not 1,000)"),
    ("1.2.3", "malformed number '1.2.3' at position 1"),
    ("2+.", "malformed number '.' at position 3"),
    ("a+1", "unexpected character 'a' at position 1"),
    ("1e5", "unexpected character 'e' at position 2"),
    ("1 + \u00b2", "unexpected character '\u00b2' at position 5"),   # a digit to str.isdigit
    ("__import__('os')", "unexpected character '_' at position 1"),
    ("2**0.5", "exponent must be a whole number, got 0.5"),
    ("2**(1/3)", "exponent must be a whole number, got 1/3"),
    ("2**65", "exponent 65 is too large (the limit is 64)"),
    ("2**-65", "exponent -65 is too large (the limit is 64)"),
])
def test_errors(expression, message):
    with pytest.raises(ToolError) as info:
        calculator(expression)
    assert str(info.value) == message


def test_not_a_string():
    with pytest.raises(ToolError, match="^expression must be a string$"):
        calculator(12)


def test_length_limit():
    assert calculator("1+" * 99 + "1") == "100"                  # 199 characters
    assert calculator(" " * 199 + "1") == "1"                    # exactly 200
    with pytest.raises(ToolError, match="^expression longer than 200 characters$"):
        calculator(" " * 200 + "1")


def test_depth_limit():
    assert calculator("(" * 20 + "1" + ")" * 20) == "1"
    for deep in ("(" * 21 + "1" + ")" * 21, "-" * 21 + "1", "-(" * 10 + "-1" + ")" * 10):
        with pytest.raises(ToolError, match="^expression nested deeper than 20 levels$"):
            calculator(deep)
    assert calculator("-" * 20 + "1") == "1"                     # 20 signs: even, within the limit


def test_ten_thousand_parentheses_raise_tool_error_not_recursion_error(monkeypatch):
    deep = "(" * 10_000 + "1" + ")" * 10_000
    with pytest.raises(ToolError, match="longer than 200"):
        calculator(deep)
    # the depth limit alone keeps the stack safe, whatever the length limit is
    monkeypatch.setattr(calc, "MAX_LENGTH", 100_000)
    with pytest.raises(ToolError, match="^expression nested deeper than 20 levels$"):
        calculator(deep)


def test_size_limits():
    big = "9" * MAX_DIGITS            # 10**100 - 1: the largest value allowed
    assert calculator(big) == big
    with pytest.raises(ToolError, match="^number at position 1 has more than 100 digits$"):
        calculator("1" + "0" * MAX_DIGITS)
    with pytest.raises(ToolError, match="^number at position 1 has more than 100 digits$"):
        calculator("0." + "0" * 99 + "1")                   # denominator 10**100
    # 99**50 = 6.05e99 fits; 99**51 = 5.99e101 does not
    assert calculator("99**50") == str(99 ** 50)
    for too_big in ("99**51", "10**50*10**50", big + "+1", "1/" + big + "/2", "(1/2)**64/10**40/10**41"):
        with pytest.raises(ToolError, match="^result too large \\(more than 100 digits\\)$"):
            calculator(too_big)


def test_huge_power_is_refused_before_it_is_computed(monkeypatch):
    def no_pow(*args):
        raise AssertionError("computed")
    monkeypatch.setattr(calc.Fraction, "__pow__", no_pow)
    with pytest.raises(ToolError, match="result too large"):
        calc.power(Fraction(10 ** 99), Fraction(64))


def test_docstring_is_the_tool_description():
    assert Tool.from_function(calculator).schema() == {"type": "function", "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {"type": "object", "required": ["expression"], "properties": {"expression": {
            "type": "string",
            "description": 'Numbers (like 12 or 1.5) with + - * / // % ** (or ^ for power) and '
                           'parentheses, e.g. "(23*47 - 1) / 4".'}}}}}
